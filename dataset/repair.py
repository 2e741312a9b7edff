"""``dataset verify --repair``: recollect exactly the robots whose stores are damaged.

An episode is a pure function of the fleet seed, the robot and its attempt index, so a
damaged robot's store can be made again bit for bit: the same episodes, the same frames.
Repair verifies the store, moves each damaged robot's store aside (``OUT/.repair/``),
runs ``collect`` for those robots alone, with the collection's own data config and each
robot's attempt count from ``manifest.json``, and verifies them again. The damaged copies
are deleted only once the new stores verify clean; if recollection fails they are moved
back, so the store is never left with fewer episodes than before.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from collect.config import CollectConfig
from collect.engine import run_collection
from collect.manifest import MANIFEST
from collect.shard import store_name
from dataset.fleet_store import FleetStore
from dataset.verify import Problem, verify_store

ASIDE = ".repair"


@dataclass
class RepairReport:
    robots: list[int]  # the robots recollected
    episodes: int  # episodes committed in their new stores
    remaining: list[Problem]  # what verify still finds after the repair (store-level problems included)


def damaged_robots(problems: list[Problem]) -> list[int]:
    """The robots with a problem in their own store (notes are not damage)."""
    return sorted({int(problem.shard.split("_")[1].split(".")[0]) for problem in problems
                   if problem.shard and not problem.note})


def repair_store(path: str | Path, workers: int = 1, quiet: bool = False,
                 problems: list[Problem] | None = None) -> RepairReport:
    """Recollect the damaged robots of the collection at ``path`` (see the module docstring).

    ``problems`` are what ``verify_store`` has just found there (else it runs here).
    Raises ``ValueError`` where the damage cannot be repaired from seeds: no manifest, a
    collection not made by ``collect`` (an import), or problems outside any robot's store.
    """
    path = Path(path)
    store = FleetStore.open(path)
    manifest = store.manifest
    if manifest is None or not manifest.get("collect_config"):
        raise ValueError(f"{path} has no {MANIFEST} written by collect: its episodes cannot be recollected")
    problems = verify_store(store, progress=not quiet) if problems is None else problems
    if store_level := [problem for problem in problems if problem.shard is None and not problem.note]:
        raise ValueError(f"cannot repair {path}: {store_level[0]}")
    robots = damaged_robots(problems)
    if not robots:
        return RepairReport([], 0, [problem for problem in problems if not problem.note])
    fields = CollectConfig.__dataclass_fields__
    original = {key: value for key, value in manifest["collect_config"].items() if key in fields}
    config = CollectConfig(**{**original, "out": str(path), "workers": workers, "quiet": quiet, "scheduler": None,
                              "overwrite": False,
                              # the last collect run may have named fewer robots than the store holds
                              "robots": max(original.get("robots", 1), max(robots) + 1)})
    listed = manifest.get("robots", {})
    attempts = {robot: listed[str(robot)]["episodes"] + listed[str(robot)]["failed"] if str(robot) in listed
                else config.episodes for robot in robots}
    aside = path / ASIDE
    aside.mkdir(exist_ok=True)
    moved = []
    try:
        for robot in robots:
            if (path / store_name(robot)).exists():
                (path / store_name(robot)).rename(aside / store_name(robot))
                moved.append(robot)
        run_collection(config, robot_episodes=attempts)
    except BaseException:  # put the damaged stores back: repair never leaves fewer episodes than it found
        for robot in moved:
            shutil.rmtree(path / store_name(robot), ignore_errors=True)
            (aside / store_name(robot)).rename(path / store_name(robot))
        raise
    repaired = FleetStore.open(path)
    remaining = verify_store(repaired)
    if not set(damaged_robots(remaining)) & set(robots):
        shutil.rmtree(aside)
    return RepairReport(robots, sum(repaired.num_episodes_of(robot) for robot in robots), remaining)
