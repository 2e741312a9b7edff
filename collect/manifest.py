"""OUT/manifest.json and the checks made before anything is written to OUT.

The manifest is rewritten atomically (``core.files.write_json_atomic``: temp file +
``os.replace``) at the start and at the end of every run, so it always parses. Its
per-robot counts are the stores' committed episodes (read from disk, or reported by the
task that just closed the store), never what a run meant to do. The one exception: a robot
under repair (listed in ``OUT/.repair/journal.json``, see ``dataset/repair.py``) keeps the
entry it had before repair set its damaged store aside, until the repair is done.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from collect.config import CollectConfig
from collect.shard import SCHEMA_VERSION, read_progress, store_name
from collect.worker import RobotReport
from core.errors import check_output_directory
from core.files import code_version, write_json_atomic
from sim.fleet import RobotProfile
from sim.tasks import TaskSpec

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


def read_repair_journal(directory: Path) -> dict[int, dict]:
    """The robots under repair in DIRECTORY (robot id -> its record, see ``dataset/repair.py``); {} when none."""
    path = Path(directory) / REPAIR_DIR / REPAIR_JOURNAL
    if not path.exists():
        return {}
    journal = _read_json(path)
    if not isinstance(journal, dict) or not isinstance(journal.get("robots"), dict):
        raise ValueError(f"{path} is damaged: it lists no robots; restore it")
    return {int(robot): record for robot, record in journal["robots"].items()}


def _check_compatible(out: Path, config: CollectConfig, features: dict) -> None:
    existing = read_manifest(out)
    expected = {"schema_version": SCHEMA_VERSION, **config.data_config(), "features": features}
    found = {"schema_version": existing.get("schema_version"), **existing.get("data_config", {}),
             "features": existing.get("features")}
    for key, value in expected.items():
        if found.get(key) != value:
            shown = "(differs)" if key == "features" else f"{found.get(key)!r}, not {value!r}"
            raise ValueError(f"{out} holds a different collection: its {key} is {shown}; use --overwrite or another --out")


def check_output(out: Path, config: CollectConfig, features: dict) -> None:
    """Refuse an OUT that is (or lies under) a file, holds something else, or holds a different collection.

    Reads only: nothing is written before every check has passed.
    """
    check_output_directory(out)
    has_content = out.is_dir() and any(out.iterdir())
    if has_content and not (out / MANIFEST).exists():
        raise ValueError(f"--out {out} is not empty and is not a RoboFleet collection; refusing to write there")
    if has_content and not config.overwrite:
        _check_compatible(out, config, features)


def create_output(out: Path, config: CollectConfig) -> dict[int, int]:
    """Create (or, with --overwrite, clear) OUT; return the episodes already settled per robot."""
    if config.overwrite and out.is_dir():
        shutil.rmtree(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as error:
        raise ValueError(f"cannot write to --out {out}: {error.strerror}") from None
    settled = {}
    for robot_id in range(config.robots):
        progress = read_progress(out / store_name(robot_id))
        settled[robot_id] = sum(index < config.episodes for index in progress.settled_indices)
    return settled


def robot_entry(site: str | None, episodes: int = 0, frames: int = 0, failed: int = 0) -> dict:
    """One robot's entry in the manifest: its site and committed counts."""
    return {"site": site, "episodes": episodes, "frames": frames, "failed": failed}


def write_manifest(out: Path, config: CollectConfig, spec: TaskSpec, features: dict, fps: int,
                   fleet: list[RobotProfile], reports: Iterable[RobotReport] = (), lineage: dict | None = None) -> None:
    """(Re)write OUT/manifest.json of a collection from the stores that are on disk now.

    ``reports`` of robots whose tasks just finished give their counts without reading
    their stores again (about 3 ms a store). ``lineage`` (where the data came from, when
    not the task's expert) is kept as it is.
    """
    known = {report.robot_id: robot_entry(report.site, report.kept, report.frames, report.failed)
             for report in reports}
    # "reference" is the task as given (a name, env id or module:attr): what later commands resolve it from
    task = {"name": spec.name, "env_id": spec.env_id, "reference": config.task}
    write_store_manifest(out, task=task, fps=fps, features=features,
                         seed=config.seed, data_config=config.data_config(),
                         collect_config={**config.__dict__, "cameras": list(config.cameras)},
                         sites={profile.robot_id: profile.site for profile in fleet}, known=known,
                         **({"lineage": lineage} if lineage else {}))


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
