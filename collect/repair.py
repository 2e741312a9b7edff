"""``collect --repair``: recollect exactly the robots whose stores are damaged.

An episode is a pure function of the fleet seed, the robot and its attempt index, so a
damaged robot's store can be made again bit for bit. Repair works in four steps, and a crash
at any point (``kill -9`` included) loses nothing:

1. **record**: ``OUT/.repair/journal.json`` (written atomically) lists each damaged robot: its
   manifest entry, the episodes to attempt, whether it had a store, and the episodes verify found
   damaged. While the journal lists a robot, the manifest keeps its entry, ``dataset verify``
   reports it as damage, training refuses the store and ``dataset info`` shows it.
2. **set aside**: each damaged store moves to ``OUT/.repair/``.
3. **recollect**: ``collect`` runs for those robots alone, with the collection's own config and
   the recorded attempt counts. The result is verified, and each episode is compared with the
   original's where verify found nothing wrong with the original's. A recollection that differs
   (a task that is not deterministic) is refused, and the originals go back in place.
4. **finish**: the journal is removed (the commit point), then the originals.

A rerun carries on from the journal: a store in OUT whose original is aside is the recollection
so far, which ``collect`` resumes (or starts again, if verify finds it damaged).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from collect.config import CollectConfig
from collect.engine import run_collection
from core.errors import crash_point
from core.files import write_json_atomic
from dataset.chunks import read_rows
from dataset.fleet_store import FleetStore
from dataset.manifest import MANIFEST, REPAIR_DIR, REPAIR_JOURNAL, robot_entry
from dataset.shard import store_name
from dataset.verify import Problem, under_repair, verify_shard, verify_store
from sim.tasks import recorded_tasks

ASIDE = REPAIR_DIR


@dataclass
class RepairReport:
    robots: list[int]  # the robots recollected
    episodes: int  # episodes committed in their new stores
    remaining: list[Problem]  # what verify still finds after the repair (store-level problems included)


def damaged_robots(problems: list[Problem]) -> list[int]:
    """The robots with a problem in their own store (notes are not damage)."""
    return sorted({int(problem.shard.split("_")[1].split(".")[0]) for problem in problems
                   if problem.shard and not problem.note})


def _config(path: Path, manifest: dict, workers: int, quiet: bool) -> CollectConfig:
    """The collect config that made ``path``, writing into it again."""
    fields = CollectConfig.__dataclass_fields__
    original = {key: value for key, value in manifest["collect_config"].items() if key in fields}
    return CollectConfig(**{**original, "out": str(path), "workers": workers, "quiet": quiet, "scheduler": None,
                            "overwrite": False, "repair": None})


def _record(store: FleetStore, robot: int, problems: list[Problem], episodes: int) -> dict:
    """A damaged robot's journal entry (see the module docstring)."""
    listed = store.manifest["robots"].get(str(robot))
    own = [problem for problem in problems if problem.shard == store_name(robot) and not problem.note]
    return {"entry": listed or robot_entry(None),
            "attempts": listed["episodes"] + listed["failed"] if listed else episodes,
            "had_store": robot in store.shards,
            # None: a problem of the whole store (its episode_ends, its attrs), so no episode compares
            "damaged_episodes": None if any(p.episode is None for p in own) else sorted({p.episode for p in own})}


def repair_store(path: str | Path, workers: int = 1, quiet: bool = False,
                 problems: list[Problem] | None = None, given_task: str | None = None) -> RepairReport:
    """Recollect the damaged robots of the collection at ``path`` (see the module docstring).

    ``problems`` are what ``verify_store`` has just found there (else it runs here). Raises
    ``ValueError`` where the damage cannot be repaired from seeds (no manifest, a collection not
    made by ``collect``, problems outside any robot's store) and where a recollection differs
    from the original, and where the manifest names a plug-in task that ``given_task`` (the user's
    ``--task``) does not (``sim.tasks.recorded_tasks``). The report's ``remaining`` holds what verify
    still finds: any of it in a repaired robot's store leaves the journal in place, for the next
    repair to carry on.
    """
    path = Path(path)
    store = FleetStore.open(path)
    manifest = store.manifest
    if manifest is None or not manifest.get("collect_config"):
        raise ValueError(f"{path} has no {MANIFEST} written by collect: its episodes cannot be recollected")
    config = _config(path, manifest, workers, quiet)
    recorded_tasks(config.task, given_task, f"{path / MANIFEST}")
    problems = verify_store(store, progress=not quiet, given_task=given_task) if problems is None else problems
    if store_level := [problem for problem in problems if problem.shard is None and not problem.note]:
        raise ValueError(f"cannot repair {path}: {store_level[0]}")
    records = dict(store.repairing)
    for robot in damaged_robots(problems):
        records.setdefault(robot, _record(store, robot, problems, config.episodes))
    if not records:
        return RepairReport([], 0, [problem for problem in problems if not problem.note])
    config.robots = max(config.robots, max(records) + 1)  # the last collect run may have named fewer robots
    aside = path / ASIDE
    if not store.repairing:
        shutil.rmtree(aside, ignore_errors=True)  # what a finished repair left after its commit point
    aside.mkdir(exist_ok=True)
    write_json_atomic(aside / REPAIR_JOURNAL, {"robots": {str(robot): records[robot] for robot in sorted(records)}})
    crash_point("repair-recorded")
    _set_aside(store, records)
    crash_point("repair-set-aside")
    try:
        run_collection(config, robot_episodes={robot: record["attempts"] for robot, record in records.items()})
    except BaseException:  # the originals go back: repair never leaves fewer episodes than it found
        _put_back(path, records)
        raise
    repaired = FleetStore.open(path)
    journal_problems = under_repair(repaired)
    remaining = [problem for problem in verify_store(repaired, given_task=given_task)
                 if problem not in journal_problems]
    report = RepairReport(sorted(records), sum(repaired.num_episodes_of(robot) for robot in records
                                               if robot in repaired.shards), remaining)
    if set(damaged_robots(remaining)) & set(records):  # the journal stays: the next repair carries on
        report.remaining += journal_problems
        return report
    if difference := _first_difference(aside, repaired, records):
        _put_back(path, records)
        raise ValueError(f"refused to repair {path}: the recollection differs from the original, {difference}: "
                         f"task {config.task!r} does not make the same episode from the same seed; "
                         "the damaged stores are back in place")
    crash_point("repair-verified")
    (aside / REPAIR_JOURNAL).unlink()
    shutil.rmtree(aside)
    return report


def _set_aside(store: FleetStore, records: dict[int, dict]) -> None:
    """Move each damaged original to ``.repair/``; drop a recollection so far that is itself damaged."""
    for robot, record in records.items():
        current, original = store.path / store_name(robot), store.path / ASIDE / store_name(robot)
        if record["had_store"] and not original.exists():
            if current.exists():
                current.rename(original)
        elif robot in store.shards and verify_shard(store.shards[robot]):
            shutil.rmtree(current)


def _put_back(path: Path, records: dict[int, dict]) -> None:
    """Give the store back as repair found it: the originals in place, no recollection, no journal."""
    for robot in records:
        shutil.rmtree(path / store_name(robot), ignore_errors=True)
        if (path / ASIDE / store_name(robot)).exists():
            (path / ASIDE / store_name(robot)).rename(path / store_name(robot))
    (path / ASIDE / REPAIR_JOURNAL).unlink()
    shutil.rmtree(path / ASIDE)


def _first_difference(aside: Path, repaired: FleetStore, records: dict[int, dict]) -> str | None:
    """Where a recollected episode differs from its original, in the originals' episodes that are intact."""
    comparable = {robot: record for robot, record in sorted(records.items())
                  if record["damaged_episodes"] is not None and (aside / store_name(robot)).exists()}
    originals = FleetStore.open(aside) if comparable else None
    for robot, record in comparable.items():
        for position in range(originals.num_episodes_of(robot)):
            if position not in record["damaged_episodes"]:
                if difference := _episode_difference(originals, repaired, robot, position):
                    return f"{store_name(robot)} episode {position}: {difference}"
    return None


def _episode_difference(originals: FleetStore, repaired: FleetStore, robot: int, position: int) -> str | None:
    """What differs in one episode between the original and the recollection (None: nothing)."""
    if robot not in repaired.shards or position >= repaired.num_episodes_of(robot):
        return "it is missing from the recollection"
    if originals.episode_info(robot, position) != repaired.episode_info(robot, position):
        return "its seed, success or length differ"
    before, after = originals.shards[robot], repaired.shards[robot]
    for name in before.group["data"].array_keys():
        try:
            values = read_rows(before, f"data/{name}", *before.bounds(position))
        except ValueError:  # a damaged chunk holds part of it: nothing left to compare with
            continue
        if values.tobytes() != read_rows(after, f"data/{name}", *after.bounds(position)).tobytes():
            return f"data/{name} differs"
    return None
