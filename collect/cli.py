"""``collect``: run every robot's scripted expert in parallel and write one zarr store per robot.

    collect --robots 100 --episodes 20 --task pick_place --out data/fleet
    collect --repair data/fleet      verify a store and recollect its damaged robots from their seeds

Rerunning the same command resumes: committed episodes are kept and the missing ones
are collected with the same seeds. Ctrl-C stops cleanly; what was committed stays valid.
"""

from __future__ import annotations

import sys

from collect.config import CollectConfig
from collect.engine import run_collection
from collect.repair import repair_store
from core.errors import fail, quiet_closed_pipes
from core.lock import output_lock
from core.options import parse_config
from dataset import FleetStore
from dataset.cli import open_store, print_problems, report_verdict

INTERRUPTED_EXIT = 130


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    config = parse_config(CollectConfig, __doc__, argv)
    if config.repair:
        store = open_store(config.repair)  # no store there: its one-line error, before a lock file is made beside it
        with output_lock(config.repair, "collect --repair"):
            repair(config, store)
        return
    try:
        with output_lock(config.out, "collect"):
            summary = run_collection(config)
    except ValueError as error:
        fail(str(error))
    except KeyboardInterrupt:
        print(f"\ninterrupted: committed episodes in {config.out} are intact; rerun the same command to resume",
              file=sys.stderr)
        raise SystemExit(INTERRUPTED_EXIT) from None
    if not config.quiet:
        print(summary.format())


def repair(config: CollectConfig, store: FleetStore) -> None:
    """``collect --repair STORE``: print what verify finds in ``store`` (opened from STORE), recollect the
    damaged robots, and say what remains (exit 1) or that the store is OK."""
    found = print_problems(store, progress=not config.quiet, given_task=config.task)
    problems = [problem for problem in found if not problem.note]
    if problems:
        try:
            report = repair_store(store.path, workers=config.workers, quiet=config.quiet, problems=found,
                                  given_task=config.task)
        except ValueError as error:
            fail(str(error))
        print(f"repaired: recollected robots {', '.join(map(str, report.robots))} ({report.episodes} episodes) "
              "from their seeds")
        for problem in report.remaining:
            print(problem)
        problems = report.remaining
        store = open_store(config.repair)
    report_verdict(store, problems)


if __name__ == "__main__":
    main()
