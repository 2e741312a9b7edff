"""``dataset``: look inside, check, summarise and convert fleet stores.

    dataset info data/fleet                      what is in it, per site and per robot (failed: stored episodes
                                                 that failed; dropped: failed attempts not stored)
    dataset verify data/fleet                    check every shard; exit 1 on corruption
                                                 (`collect --repair data/fleet` recollects the damaged robots)
    dataset stats data/fleet                     normalisation statistics (cached in stats.json)
    dataset export-lerobot data/fleet data/lerobot_fleet
                                                 a robot's observations (--inputs state+cameras adds the
                                                 simulator's privileged state; --features lists them by name)
    dataset import-lerobot data/lerobot_fleet data/imported
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.errors import check_output_directory, fail, quiet_closed_pipes, warn
from core.lock import output_lock
from core.options import check_choices, parse_subcommand
from dataset.chunks import DataError, read_rows
from dataset.fleet_store import FleetStore
from dataset.inputs import INPUTS
from dataset.shard import store_bytes
from dataset.stats import fleet_stats

CORRUPT_EXIT = 1

COUNTS = ("episodes", "failed", "dropped", "frames")  # a robot's counts in `dataset info`
STORE = {"positional": True, "help": "fleet store directory (the OUT of collect)"}


@dataclass
class InfoConfig:
    """What a fleet store holds, per site and per robot."""

    store: str = field(metadata=STORE)
    json: bool = field(default=False, metadata={"help": "print JSON instead of tables"})


@dataclass
class VerifyConfig:
    """Check every shard: structure, episode_ends, every chunk, NaN and inf."""

    store: str = field(metadata=STORE)
    quick: bool = field(default=False, metadata={"help": "check structure and metadata only, not every chunk"})
    task: str | None = field(default=None, metadata={
        "help": "the plug-in task (module:attr) the store names, to import it for its bounds: a store's manifest "
                "names code, and only what you name here is imported (registered tasks need nothing)"})
    repair: bool = field(default=False, metadata={"help": "moved: `collect --repair STORE` recollects damaged robots"})


@dataclass
class StatsConfig:
    """Per-dimension normalisation statistics (mean, std, min, max, q01, q99)."""

    store: str = field(metadata=STORE)
    recompute: bool = field(default=False, metadata={"help": "ignore the cached stats.json"})
    json: bool = field(default=False, metadata={"help": "print JSON instead of a table"})


@dataclass
class ExportConfig:
    """Write a fleet store as a LeRobotDataset v3.0 (through lerobot's own API)."""

    store: str = field(metadata=STORE)
    root: str = field(metadata={"positional": True, "help": "new LeRobotDataset root (must not exist)"})
    repo_id: str | None = field(default=None, metadata={"help": "dataset repo id (default: robofleet/<store name>)"})
    videos: bool = field(default=False, metadata={"help": "encode cameras as video (lossy) instead of images"})
    inputs: str | None = field(default=None, metadata={
        "help": f"the observations to write, as bc.py's --inputs: {', '.join(INPUTS)} "
                "(default: proprio+cameras for a store with cameras, else state)"})
    features: tuple[str, ...] = field(default=(), metadata={
        "help": "the observations to write, by name, instead of --inputs (e.g. observation.state "
                "observation.images.front)"})

    def __post_init__(self):
        check_output_directory(self.root, "ROOT")
        check_choices(self, {"inputs": (None, *INPUTS)})
        self.features = tuple(self.features)
        if self.inputs and self.features:
            raise ValueError("--inputs and --features are alternatives: give one of them")


@dataclass
class ImportConfig:
    """Read a local LeRobotDataset into a fleet store: one shard per robot_id, else one shard."""

    root: str = field(metadata={"positional": True, "help": "LeRobotDataset root directory"})
    out: str = field(metadata={"positional": True, "help": "fleet store directory to create"})
    repo_id: str | None = field(default=None, metadata={"help": "dataset repo id (default: from the root's name)"})
    overwrite: bool = field(default=False, metadata={"help": "replace an existing OUT"})

    def __post_init__(self):
        check_output_directory(self.out, "OUT", replaceable=self.overwrite)


def open_store(path: str) -> FleetStore:
    """The fleet store at ``path``; where there is none, or it cannot be read, a one-line error."""
    try:
        return FleetStore.open(path)
    except (FileNotFoundError, ValueError) as error:  # no store there; a corrupt manifest or unreadable shard
        fail(str(error))


def _table(header: list[str], rows: list[list]) -> str:
    cells = [header, *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in cells)


def robot_counts(shard) -> dict[str, int]:
    """A robot store's counts: committed episodes, those of them that failed (from the episode metadata:
    collect's --keep-failures, DAgger rounds), failed attempts dropped unstored, and frames."""
    try:
        successes = read_rows(shard, "meta/episode_success", 0, shard.num_episodes)
    except DataError as error:
        fail(f"{error}; run `collect --repair {shard.path.parent}`")
    return {"episodes": shard.num_episodes, "failed": int(np.count_nonzero(~successes.astype(bool))),
            "dropped": len(shard.group.attrs.get("failed_episodes", [])), "frames": shard.num_frames}


def store_summary(store: FleetStore) -> dict:
    """Per-robot and per-site episode, failure and frame counts, with the task and features.

    A robot the manifest lists whose store is missing, or that an interrupted repair has not
    finished, is listed with its ``state`` and no counts; the totals leave it out.
    """
    listed = (store.manifest or {}).get("robots", {})
    robots = []
    for robot_id in sorted({*store.robots, *store.missing_robots, *store.repairing}):
        shard = store.shards.get(robot_id)
        state = "under repair" if robot_id in store.repairing else "missing" if shard is None else "ok"
        robots.append({"robot_id": robot_id, "state": state,
                       "site": store.site_of(robot_id) if state == "ok" else listed.get(str(robot_id), {}).get("site"),
                       **(robot_counts(shard) if state == "ok" else dict.fromkeys(COUNTS))})
    sites = defaultdict(lambda: {"robots": 0, **dict.fromkeys(COUNTS, 0)})
    for robot in robots:
        if robot["state"] == "ok":
            sites[robot["site"]]["robots"] += 1
            for key in COUNTS:
                sites[robot["site"]][key] += robot[key]
    manifest = store.manifest or {}
    return {"path": str(store.path), "task": (manifest.get("task") or {}).get("name"), "fps": manifest.get("fps"),
            "features": {name: feature["shape"] for name, feature in store.features.items()},
            **({"task_features": {task: {name: feature["shape"] for name, feature in own.items()}
                                  for task, own in store.task_features.items()}} if store.task_features else {}),
            "episodes": sum(site["episodes"] for site in sites.values()),
            "frames": sum(site["frames"] for site in sites.values()), "bytes": store_bytes(store.path),
            "sites": dict(sites), "robots": robots}


def info(config: InfoConfig) -> None:
    summary = store_summary(open_store(config.store))
    if config.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['path']}: task {summary['task']}, {summary['fps']} fps, {summary['episodes']} episodes, "
              f"{summary['frames']} frames, {summary['bytes'] / 2**20:.1f} MiB")
        print("features: " + ", ".join(f"{name} {shape}" for name, shape in summary["features"].items()))
        for task, own in summary.get("task_features", {}).items():
            print(f"  {task}'s own: " + ", ".join(f"{name} {shape}" for name, shape in own.items()))
        print()
        print(_table(["site", "robots", *COUNTS],
                     [[site, *values.values()] for site, values in sorted(summary["sites"].items())]) + "\n")
        print(_table(["robot", "state", "site", *COUNTS],
                     [["-" if value is None else value for value in robot.values()] for robot in summary["robots"]]))
    if unusable := [robot for robot in summary["robots"] if robot["state"] != "ok"]:
        states = ", ".join(f"robot {robot['robot_id']} {robot['state']}" for robot in unusable[:5])
        warn(f"{len(unusable)} robot store(s) are not usable ({states}{', ...' if len(unusable) > 5 else ''}); "
             f"run `collect --repair {summary['path']}`")


def verify(config: VerifyConfig) -> None:
    if config.repair:
        fail(f"`dataset verify --repair` moved to collect: run `collect --repair {config.store}`")
    store = open_store(config.store)
    found = print_problems(store, check_data=not config.quick, progress=True, given_task=config.task)
    report_verdict(store, [problem for problem in found if not problem.note])


def print_problems(store: FleetStore, check_data: bool = True, progress: bool = True,
                   given_task: str | None = None) -> list:
    """Verify ``store`` (``dataset.verify.verify_store``, notes included) and print what it finds, one a line."""
    from dataset.verify import verify_store  # it loads the task (and mujoco) to check values: info does not

    found = verify_store(store, check_data=check_data, progress=progress, notes=True, given_task=given_task)
    for problem in found:
        print(problem)
    return found


def report_verdict(store: FleetStore, problems: list) -> None:
    """Exit 1 with a one-line count of the ``problems`` left in ``store``, or print that it is OK."""
    if problems:
        fail(f"{len(problems)} problem(s) in {store.path}", code=CORRUPT_EXIT)
    print(f"{store.path}: {len(store.robots)} shards, {store.num_episodes} episodes, {store.num_frames} frames: OK")


def stats(config: StatsConfig) -> None:
    try:
        values = fleet_stats(open_store(config.store), recompute=config.recompute)
    except ValueError as error:
        fail(str(error))
    if config.json:
        print(json.dumps({name: {k: v.tolist() for k, v in s.items()} for name, s in values.items()}, indent=2))
        return
    rows = []
    for name, feature_stats in values.items():
        for dim in range(feature_stats["mean"].size):
            rows.append([f"{name}[{dim}]", *(f"{np.ravel(feature_stats[k])[dim]:.4g}" for k in feature_stats)])
    print(_table(["feature", *next(iter(values.values()))], rows))


def export_lerobot(config: ExportConfig) -> None:
    from dataset.lerobot_io import default_inputs, export_lerobot as export  # lerobot is slow to import

    store = open_store(config.store)
    try:
        with output_lock(config.root, "dataset export-lerobot", "ROOT"):
            root = export(store, Path(config.root), repo_id=config.repo_id, use_videos=config.videos,
                          inputs=config.inputs, features=list(config.features))
    except ValueError as error:
        fail(str(error))
    chosen = (f"--features {' '.join(config.features)}" if config.features
              else f"--inputs {config.inputs or default_inputs(store.features)}")
    print(f"wrote LeRobotDataset {root} (observations: {chosen})")


def import_lerobot(config: ImportConfig) -> None:
    from dataset.lerobot_io import import_lerobot as import_  # lerobot is slow to import: only when asked

    try:
        with output_lock(config.out, "dataset import-lerobot", "OUT"):
            import_(Path(config.root), Path(config.out), repo_id=config.repo_id, overwrite=config.overwrite)
    except (ValueError, FileNotFoundError) as error:
        fail(str(error))
    print(f"wrote fleet store {config.out}")


COMMANDS = {"info": (InfoConfig, info), "verify": (VerifyConfig, verify), "stats": (StatsConfig, stats),
            "export-lerobot": (ExportConfig, export_lerobot), "import-lerobot": (ImportConfig, import_lerobot)}


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    name, config = parse_subcommand({name: config for name, (config, _) in COMMANDS.items()}, __doc__, argv)
    COMMANDS[name][1](config)


if __name__ == "__main__":
    main()
