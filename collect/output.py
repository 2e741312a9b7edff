"""The checks made before a collection writes anything to OUT, and its OUT/manifest.json."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from collect.config import CollectConfig
from collect.worker import RobotReport
from core.errors import check_output_directory
from dataset.manifest import MANIFEST, read_manifest, robot_entry, write_store_manifest
from dataset.shard import SCHEMA_VERSION, read_progress, store_name
from sim.fleet import RobotProfile
from sim.tasks import TaskSpec


def _check_compatible(out: Path, config: CollectConfig, features: dict, lineage: dict | None) -> None:
    existing = read_manifest(out)
    expected = {"schema_version": SCHEMA_VERSION, **config.data_config(), "features": features}
    found = {"schema_version": existing.get("schema_version"), **existing.get("data_config", {}),
             "features": existing.get("features")}
    if lineage is not None:  # who acted, and how: a deployment with other settings is another collection
        expected.update({f"lineage's {key}": value for key, value in json.loads(json.dumps(lineage)).items()})
        found.update({f"lineage's {key}": value for key, value in existing.get("lineage", {}).items()})
    for key, value in expected.items():
        if found.get(key) != value:
            shown = "(differs)" if key == "features" else f"{found.get(key)!r}, not {value!r}"
            raise ValueError(f"{out} holds a different collection: its {key} is {shown}; use --overwrite or another --out")


def check_output(out: Path, config: CollectConfig, features: dict, lineage: dict | None = None) -> None:
    """Refuse an OUT that is (or lies under) a file, holds something else, or holds a different collection
    (other data settings, or another ``lineage``: who acts, and how).

    Reads only: nothing is written before every check has passed.
    """
    check_output_directory(out)
    has_content = out.is_dir() and any(out.iterdir())
    if has_content and not (out / MANIFEST).exists():
        raise ValueError(f"--out {out} is not empty and is not a RoboFleet collection; refusing to write there")
    if has_content and not config.overwrite:
        _check_compatible(out, config, features, lineage)


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


def write_manifest(out: Path, config: CollectConfig, tasks: list[TaskSpec], features: dict, fps: int,
                   fleet: list[RobotProfile], reports: Iterable[RobotReport] = (), lineage: dict | None = None,
                   task_features: dict | None = None) -> None:
    """(Re)write OUT/manifest.json of a collection from the stores that are on disk now.

    ``reports`` of robots whose tasks just finished give their counts without opening
    their stores again. ``lineage`` (where the data came from, when
    not the task's expert) is kept as it is. A group's ``tasks`` are listed in the order
    the frames' ``task_index`` counts them.
    """
    known = {report.robot_id: robot_entry(report.site, report.kept, report.frames, report.failed)
             for report in reports}
    # "reference" is the task as given (a name, env id or module:attr): what later commands resolve it from
    if len(tasks) == 1:
        task = {"name": tasks[0].name, "env_id": tasks[0].env_id, "reference": config.task}
    else:  # a group, shared out over the fleet by sim.fleet.fleet_task; frames record their index in "tasks"
        task = {"name": config.task, "env_id": None, "reference": config.task, "tasks": [spec.name for spec in tasks],
                **({"features": task_features} if task_features else {})}
    write_store_manifest(out, task=task, fps=fps, features=features,
                         seed=config.seed, data_config=config.data_config(),
                         collect_config={**config.__dict__, "cameras": list(config.cameras)},
                         sites={profile.robot_id: profile.site for profile in fleet}, known=known,
                         **({"lineage": lineage} if lineage else {}))
