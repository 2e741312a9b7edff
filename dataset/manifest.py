"""OUT/manifest.json of a fleet store, and the journal of a repair in progress beside it.

The manifest is rewritten atomically (``core.files.write_json_atomic``: temp file +
``os.replace``) by every writer of a fleet store (``collect`` at the start and at the end of
every run), so it always parses. Its per-robot counts are the stores' committed episodes
(read from disk, or reported by the task that just closed the store), never what a run meant
to do. The one exception: a robot under repair (listed in ``OUT/.repair/journal.json``, see
``collect/repair.py``) keeps the entry it had before repair set its damaged store aside, until
the repair is done.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from core.files import code_version, write_json_atomic
from dataset.shard import SCHEMA_VERSION, read_progress
from sim.fleet import fleet_task

MANIFEST = "manifest.json"
REPAIR_DIR = ".repair"  # where repair sets damaged robot stores aside, beside its journal
REPAIR_JOURNAL = "journal.json"
# Keys every manifest has, and the types they must have (None: written without a fleet seed, an import)
REQUIRED = {"task": (dict,), "fps": (int, type(None)), "seed": (int, type(None)), "features": (dict,),
            "robots": (dict,)}


def _read_json(path: Path) -> object:
    """A JSON file, parsed; one that is not JSON is a ``ValueError`` naming it."""
    try:
        return json.loads(path.read_bytes())
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is corrupt, not JSON ({error}); restore it, or recollect into a new --out "
                         f"(or this one with --overwrite)") from None


def read_manifest(directory: Path) -> dict | None:
    """DIRECTORY/manifest.json, parsed; None where there is none.

    The one place a manifest is read: one that is not JSON, is not an object, or lacks a key of
    ``REQUIRED`` (or holds it with another type) is a ``ValueError`` naming the file.
    """
    path = Path(directory) / MANIFEST
    if not path.exists():
        return None
    manifest = _read_json(path)
    if not isinstance(manifest, dict):
        raise ValueError(f"{path} is not a RoboFleet manifest: it holds a JSON {type(manifest).__name__}, "
                         "not an object; restore it, or recollect into a new --out")
    if missing := [key for key in REQUIRED if key not in manifest]:
        raise ValueError(f"{path} is not a RoboFleet manifest: it lacks {', '.join(missing)}; restore it, "
                         "or recollect into a new --out")
    for key, types in REQUIRED.items():
        if not isinstance(manifest[key], types) or isinstance(manifest[key], bool):
            raise ValueError(f"{path} is damaged: its {key} is a JSON {type(manifest[key]).__name__}; restore it, "
                             "or recollect into a new --out")
    return manifest


def robot_task(manifest: dict, robot_id: int) -> str:
    """The name of the task robot ``robot_id`` of a collection runs: the manifest's task, or in a multi-task
    collection the one of its ``tasks`` that ``sim.fleet.fleet_task`` gives the robot."""
    task = manifest.get("task") or {}
    return fleet_task(task["tasks"], robot_id) if task.get("tasks") else task.get("name")


def task_features(manifest: dict) -> dict[str, dict]:
    """A multi-task collection's features that its tasks record each in their own shape: task -> {feature:
    description} (``dataset.schema.shared_layout``); {} where the tasks share every feature."""
    return (manifest.get("task") or {}).get("features") or {}


def robot_features(manifest: dict, robot_id: int) -> dict:
    """The features robot ``robot_id``'s store holds: the manifest's, with its task's own where it has any."""
    return {**manifest.get("features", {}), **task_features(manifest).get(robot_task(manifest, robot_id), {})}


def read_repair_journal(directory: Path) -> dict[int, dict]:
    """The robots under repair in DIRECTORY (robot id -> its record, see ``collect/repair.py``); {} when none."""
    path = Path(directory) / REPAIR_DIR / REPAIR_JOURNAL
    if not path.exists():
        return {}
    journal = _read_json(path)
    if not isinstance(journal, dict) or not isinstance(journal.get("robots"), dict):
        raise ValueError(f"{path} is damaged: it lists no robots; restore it")
    return {int(robot): record for robot, record in journal["robots"].items()}


def robot_entry(site: str | None, episodes: int = 0, frames: int = 0, failed: int = 0) -> dict:
    """One robot's entry in the manifest: its site and committed counts."""
    return {"site": site, "episodes": episodes, "frames": frames, "failed": failed}


def write_store_manifest(out: Path, *, task: dict, fps: int, features: dict, seed: int | None, data_config: dict,
                         collect_config: dict | None, sites: dict[int, str] | None = None,
                         known: dict[int, dict] | None = None, **extra) -> None:
    """(Re)write OUT/manifest.json from the stores on disk now; ``sites`` fills in shards without a profile.

    ``known`` holds the entries ({site, episodes, frames, failed}) of robots whose stores
    the caller has just closed; the other stores are read. Shared by ``collect`` and the
    writers of other fleet stores (e.g. a LeRobot import); ``extra`` keys are added as they are.
    """
    sites, known = sites or {}, known or {}
    robots = {str(robot): record["entry"] for robot, record in read_repair_journal(out).items()}
    for path in sorted(out.glob("robot_*.zarr")):
        robot_id = int(path.stem.split("_")[1])
        if str(robot_id) in robots:  # under repair: its store is a recollection in progress
            continue
        if robot_id in known:
            robots[str(robot_id)] = known[robot_id]
            continue
        progress = read_progress(path)
        robots[str(robot_id)] = robot_entry(progress.site or sites.get(robot_id), progress.episodes,
                                             progress.frames, len(progress.failed_indices))
    write_json_atomic(out / MANIFEST, {
        "schema_version": SCHEMA_VERSION,
        "task": task,
        "fps": fps,
        "seed": seed,
        "data_config": data_config,
        "collect_config": collect_config,
        "code_version": code_version(),
        "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "features": features,
        "totals": {"robots": len(robots), "episodes": sum(r["episodes"] for r in robots.values()),
                   "frames": sum(r["frames"] for r in robots.values())},
        "robots": dict(sorted(robots.items(), key=lambda item: int(item[0]))),
        **extra,
    })
