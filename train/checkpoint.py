"""Checkpoints: one file holds everything training resumes from and evaluation runs from.

    RUN/checkpoints/step_00001000.pt   policy spec and weights, optimiser, scheduler, step,
                                       epoch, RNG states, config, statistics, schema, task
    RUN/checkpoints/last               symlink to the newest one

Files are written to a temporary name and renamed into place (``os.replace``), and
``last`` moves only after the new file is complete, so a crash at any moment leaves
the previous checkpoint intact. Only the newest ``keep`` are kept; a run started afresh
(``--no-resume``) in an old run's directory replaces the old run's checkpoints as it goes.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import numpy as np
import torch

from train.policy import Policy, PolicySpec, make_policy

LAST = "last"


def checkpoint_dir(run: Path) -> Path:
    return Path(run) / "checkpoints"


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def restore_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_checkpoint(run: Path, content: dict, step: int, keep: int = 3) -> Path:
    """Write ``content`` as the checkpoint of ``step`` atomically, point ``last`` at it, prune old ones."""
    directory = checkpoint_dir(run)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step_{step:08d}.pt"
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".step.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save(content, file)
        os.chmod(temporary, 0o644)  # mkstemp makes it private
        os.replace(temporary, path)
    except BaseException:  # a full disk, Ctrl-C: no half-written file left behind
        Path(temporary).unlink(missing_ok=True)
        raise
    link = directory / f".{LAST}.tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(path.name)
    os.replace(link, directory / LAST)
    for other in directory.glob("step_*.pt"):
        if other.name > path.name:  # a later step: from a history this run abandoned (--no-resume)
            other.unlink()
    for old in sorted(directory.glob("step_*.pt"))[:-keep]:
        old.unlink()
    return path


def latest_checkpoint(run: Path) -> Path | None:
    """The checkpoint ``RUN/checkpoints/last`` points at, if any."""
    last = checkpoint_dir(run) / LAST
    return last.resolve() if last.exists() else None


def load_checkpoint(path: Path) -> dict:
    """A checkpoint's content; ``path`` may be a run directory, its ``checkpoints/last`` or a file."""
    path = Path(path)
    if path.is_dir():  # a run directory or its checkpoints/ directory
        candidates = [checkpoint_dir(path) / LAST, path / LAST]
        path = next((c.resolve() for c in candidates if c.exists()), path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=False)


def load_policy(path: Path, robot_id: int | None = None) -> tuple[Policy, dict]:
    """The trained policy (in eval mode) and the checkpoint it came from.

    A federated checkpoint may carry personal weights (``checkpoint["personal"]``: robot id ->
    the state-dict entries that stay local, such as a head); with ``robot_id`` those replace the
    shared ones. A robot without personal weights gets the shared policy.
    """
    checkpoint = load_checkpoint(path)
    policy = make_policy(PolicySpec(**checkpoint["policy_spec"]), checkpoint["stats"])
    state = dict(checkpoint["model"])
    if robot_id is not None:
        state.update(checkpoint.get("personal", {}).get(int(robot_id), {}))
    policy.load_state_dict(state)
    return policy.eval(), checkpoint
