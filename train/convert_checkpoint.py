"""Convert checkpoints of the old single-file pickle format (``step_*.pt``) into the current one.

    python -m train.convert_checkpoint runs/bc                                # every step_*.pt of a run
    python -m train.convert_checkpoint runs/bc/checkpoints/step_00001000.pt   # one file

A pickle can run code when it is loaded, so RoboFleet no longer reads that format
(train/checkpoint.py). This one-time conversion reads it with ``torch.load(weights_only=True)``,
allowing numpy's array types besides (the old files keep their statistics and numpy's RNG
state as arrays): even here no code from the file runs, and a file that needs any other type
is refused, as is one that is not a regular file inside its run (core/untrusted.py) or whose
content is not a checkpoint's (missing keys, wrong types, weights that do not fit its policy
spec): in one line, before anything is written. Run it only on files you trust all the same: a
converted checkpoint's weights are what the file held. Each file becomes the checkpoint
directory of the same name without
``.pt``; a run's ``last`` then points at its newest, and the old files are removed once every
one of them is converted.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np
import torch

from core.errors import fail, one_line, quiet_closed_pipes
from core.untrusted import read_untrusted
from sim.tasks import is_registered
from train.checkpoint import LAST, TRAINING_STATE, Checkpoint, checkpoint_dir, missing_fields, run_directory
from train.policies.policy import PolicySpec

# what numpy arrays unpickle through; torch's weights_only loader rebuilds nothing else
NUMPY_TYPES = [np.ndarray, np.dtype, np._core.multiarray._reconstruct,
               *(getattr(np.dtypes, name) for name in dir(np.dtypes) if name.endswith("DType"))]


def read_old_checkpoint(path: Path) -> dict:
    """An old checkpoint file's content, loaded without running code; a one-line ``ValueError`` otherwise."""
    allowed = {f"{kind.__module__}.{kind.__qualname__}" for kind in NUMPY_TYPES}
    try:
        data = read_untrusted(path, run_directory(path))
        foreign = [name for name in torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
                   if name not in allowed]
        if foreign:
            raise ValueError(f"it would call {', '.join(foreign)}, which no checkpoint holds: refused, nothing run")
        with torch.serialization.safe_globals(NUMPY_TYPES):
            content = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # a foreign type, a truncated or foreign file
        reason = str(error) if isinstance(error, ValueError) else one_line(error)
        raise ValueError(f"cannot convert {path}: {reason}") from None
    if not isinstance(content, dict) or not {"policy_spec", "model", "stats", "features", "step"} <= set(content):
        raise ValueError(f"cannot convert {path}: it is not a RoboFleet checkpoint")
    return content


def _numpy_rng(state) -> list:
    name, keys, position, has_gauss, cached = state
    return [name, np.asarray(keys).tolist(), position, has_gauss, cached]


def registered_task(task) -> dict | None:
    """The old file's task record without a ``module:attr`` reference (code the file would have evaluate import):
    a plug-in task is named again with ``evaluate --task`` (sim/tasks.py ``recorded_task``)."""
    if not isinstance(task, dict):
        return None
    kept = {key: task[key] for key in ("name", "env_id") if isinstance(task.get(key), str)}
    reference = task.get("reference")
    if isinstance(reference, str) and is_registered(reference):
        kept["reference"] = reference
    return kept or None


def converted(content: dict) -> Checkpoint:
    """The old content as a ``Checkpoint``, with its resume state where it has one."""
    training = {key: content[key] for key in ("optimizer", "scheduler", "rng", "ema", "scaler", "federated")
                if key in content}
    if "rng" in training:
        training["rng"] = {**training["rng"], "numpy": _numpy_rng(training["rng"]["numpy"])}
    return Checkpoint(spec=PolicySpec.from_dict(content["policy_spec"]), weights=dict(content["model"]),
                      stats=content["stats"], features=content["features"], step=content["step"],
                      task=registered_task(content.get("task")), epoch=content.get("epoch", 0),
                      config=content.get("config") or {},
                      data=content.get("data"), code_version=content.get("code_version"),
                      personal={int(robot): dict(state) for robot, state in content.get("personal", {}).items()},
                      training=training or None)


def checked(file: Path) -> Checkpoint:
    """The old checkpoint ``file`` converted, its policy sized and its weights fitted on the meta device
    (``Checkpoint.check``) and its description made: a one-line ``ValueError`` where its content is not
    a checkpoint's."""
    content = read_old_checkpoint(file)
    try:
        checkpoint = converted(content)
        description = json.loads(json.dumps(checkpoint.description()))
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as error:
        raise ValueError(f"cannot convert {file}: it is not a RoboFleet checkpoint ({one_line(error)})") from None
    if wrong := missing_fields({**description, "files": {}}):
        raise ValueError(f"cannot convert {file}: it is not a RoboFleet checkpoint (its {', '.join(wrong)} "
                         "is missing or of the wrong type)")
    checkpoint.path = file
    try:
        for robot in (None, *checkpoint.personal):
            checkpoint.check({**checkpoint.weights, **checkpoint.personal.get(robot, {})})
    except ValueError as error:
        raise ValueError(f"cannot convert {error}") from None
    return checkpoint


def convert(path: Path) -> list[Path]:
    """Convert a run's old checkpoints (or one old file); returns the checkpoint directories written."""
    files = sorted(checkpoint_dir(path).glob("step_*.pt")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"no old checkpoints (step_*.pt) in {checkpoint_dir(path)}")
    checkpoints = [checked(file) for file in files]  # all of them, before the first is written
    written = [checkpoint.write(file.with_suffix("")) for file, checkpoint in zip(files, checkpoints)]
    for directory in written:
        Checkpoint.read(directory, training=(directory / TRAINING_STATE).exists())  # reads back, or raises
    if path.is_dir():
        link = checkpoint_dir(path) / LAST
        link.unlink(missing_ok=True)
        link.symlink_to(written[-1].name)
    for file in files:
        file.unlink()
    return written


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="a run directory or one old checkpoint file (step_*.pt)")
    args = parser.parse_args(argv)
    try:
        written = convert(args.path)
    except (OSError, ValueError) as error:
        fail(str(error))
    print(f"converted {len(written)} checkpoint(s): {', '.join(str(path) for path in written)}", file=sys.stdout)


if __name__ == "__main__":
    main()
