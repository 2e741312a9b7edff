"""Convert checkpoints of the old single-file pickle format (``step_*.pt``) into the current one.

    python -m train.convert_checkpoint runs/bc                                # every step_*.pt of a run
    python -m train.convert_checkpoint runs/bc/checkpoints/step_00001000.pt   # one file

A pickle can run code when it is loaded, so RoboFleet no longer reads that format
(train/checkpoint.py). This one-time conversion reads it with ``torch.load(weights_only=True)``,
allowing numpy's array types besides (the old files keep their statistics and numpy's RNG
state as arrays): even here no code from the file runs, and a file that needs any other type
is refused. Run it only on files you trust all the same: a converted checkpoint's weights
are what the file held. Each file becomes the checkpoint directory of the same name without
``.pt``; a run's ``last`` then points at its newest, and the old files are removed once every
one of them is converted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from core.errors import fail, one_line
from train.checkpoint import LAST, TRAINING_STATE, Checkpoint, checkpoint_dir
from train.policies.policy import PolicySpec

# what numpy arrays unpickle through; torch's weights_only loader rebuilds nothing else
NUMPY_TYPES = [np.ndarray, np.dtype, np._core.multiarray._reconstruct,
               *(getattr(np.dtypes, name) for name in dir(np.dtypes) if name.endswith("DType"))]


def read_old_checkpoint(path: Path) -> dict:
    """An old checkpoint file's content, loaded without running code; a one-line ``ValueError`` otherwise."""
    allowed = {f"{kind.__module__}.{kind.__qualname__}" for kind in NUMPY_TYPES}
    try:
        foreign = [name for name in torch.serialization.get_unsafe_globals_in_checkpoint(path) if name not in allowed]
        if foreign:
            raise ValueError(f"it would call {', '.join(foreign)}, which no checkpoint holds: refused, nothing run")
        with torch.serialization.safe_globals(NUMPY_TYPES):
            content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a foreign type, a truncated or foreign file
        reason = str(error) if isinstance(error, ValueError) else one_line(error)
        raise ValueError(f"cannot convert {path}: {reason}") from None
    if not isinstance(content, dict) or not {"policy_spec", "model", "stats", "features", "step"} <= set(content):
        raise ValueError(f"cannot convert {path}: it is not a RoboFleet checkpoint")
    return content


def _numpy_rng(state) -> list:
    name, keys, position, has_gauss, cached = state
    return [name, np.asarray(keys).tolist(), position, has_gauss, cached]


def converted(content: dict) -> Checkpoint:
    """The old content as a ``Checkpoint``, with its resume state where it has one."""
    training = {key: content[key] for key in ("optimizer", "scheduler", "rng", "ema", "scaler", "federated")
                if key in content}
    if "rng" in training:
        training["rng"] = {**training["rng"], "numpy": _numpy_rng(training["rng"]["numpy"])}
    return Checkpoint(spec=PolicySpec.from_dict(content["policy_spec"]), weights=dict(content["model"]),
                      stats=content["stats"], features=content["features"], step=content["step"],
                      task=content.get("task"), epoch=content.get("epoch", 0), config=content.get("config") or {},
                      data=content.get("data"), code_version=content.get("code_version"),
                      personal={int(robot): dict(state) for robot, state in content.get("personal", {}).items()},
                      training=training or None)


def convert(path: Path) -> list[Path]:
    """Convert a run's old checkpoints (or one old file); returns the checkpoint directories written."""
    files = sorted(checkpoint_dir(path).glob("step_*.pt")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"no old checkpoints (step_*.pt) in {checkpoint_dir(path)}")
    written = [converted(read_old_checkpoint(file)).write(file.with_suffix("")) for file in files]
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
