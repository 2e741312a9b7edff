"""``collect``: run every robot's scripted expert in parallel and write one zarr store per robot.

    collect --robots 100 --episodes 20 --task pick_place --out data/fleet

Rerunning the same command resumes: committed episodes are kept and the missing ones
are collected with the same seeds. Ctrl-C stops cleanly; what was committed stays valid.
"""

from __future__ import annotations

import sys

from collect.config import CollectConfig
from collect.engine import run_collection
from core.errors import fail
from core.options import parse_config

INTERRUPTED_EXIT = 130


def main(argv: list[str] | None = None) -> None:
    config = parse_config(CollectConfig, __doc__, argv)
    try:
        summary = run_collection(config)
    except ValueError as error:
        fail(str(error))
    except KeyboardInterrupt:
        print(f"\ninterrupted: committed episodes in {config.out} are intact; rerun the same command to resume",
              file=sys.stderr)
        raise SystemExit(INTERRUPTED_EXIT) from None
    if not config.quiet:
        print(summary.format())


if __name__ == "__main__":
    main()
