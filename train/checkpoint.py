"""Checkpoints: one file holds everything training resumes from and evaluation runs from.

    RUN/checkpoints/step_00001000.pt   policy spec and weights, optimiser, scheduler, step,
                                       epoch, RNG states, config, statistics, schema, task
    RUN/checkpoints/last               symlink to the newest one

Files are written to a temporary name and renamed into place (``os.replace``), and
``last`` moves only after the new file is complete, so a crash at any moment leaves
the previous checkpoint intact. Only the newest ``keep`` are kept; a run started afresh
(``--no-resume``) in an old run's directory replaces the old run's checkpoints as it goes.

A file damaged afterwards (truncated by a full disk or a bad copy, overwritten) is
skipped on resume and by ``evaluate RUN``: ``newest_intact_checkpoint`` walks back from
``last`` to the newest one that loads, with a one-line warning for each one skipped.
"""

from __future__ import annotations

import dataclasses

import os
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from sim.shared import one_line, warn
from train.policies.policy import Policy, PolicySpec, make_policy

LAST = "last"
EVALUATION_KEYS = ("policy_spec", "model", "stats", "features", "task", "step")  # what a checkpoint always holds


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


def read_checkpoint(path: Path, keys: Sequence[str] = EVALUATION_KEYS) -> dict:
    """The content of the checkpoint file ``path``; a one-line ``ValueError`` when it is missing, does
    not load (truncated, not a torch file) or lacks any of ``keys``."""
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # torch.load raises many kinds on a truncated or foreign file
        raise ValueError(f"cannot read checkpoint {path} (truncated or not a checkpoint): {one_line(error)}") from None
    missing = [key for key in keys if key not in checkpoint] if isinstance(checkpoint, dict) else ["all"]
    if missing:
        raise ValueError(f"{path} is not a RoboFleet checkpoint: it lacks {', '.join(missing)}")
    return checkpoint


def newest_intact_checkpoint(run: Path, keys: Sequence[str] = EVALUATION_KEYS,
                             quiet: bool = False) -> tuple[Path, dict] | None:
    """The newest checkpoint of ``run`` that ``read_checkpoint`` accepts, and its content; None without any.

    The walk starts at the one ``last`` points at and goes back through the older
    ``step_*.pt`` (all of them, newest first, where ``last`` is gone), and warns in one
    line of each one skipped (unless ``quiet``). Where every checkpoint is broken, a
    ``ValueError`` says so in one line. The walk depends only on the files, which no rank
    changes before every rank has loaded, so all ranks of a job pick the same one.
    """
    files = sorted(checkpoint_dir(run).glob("step_*.pt"), reverse=True)
    last = latest_checkpoint(run)
    if last is not None:  # a later file: written but not yet pointed at, or abandoned and not yet pruned
        files = [path for path in files if path.name <= last.name]
    skipped = []
    for path in files:
        try:
            checkpoint = read_checkpoint(path, keys)
        except ValueError as error:
            skipped.append(str(error))
            continue
        if not quiet:
            for reason in skipped:
                warn(f"skipped a broken checkpoint: {reason}")
        return path, checkpoint
    if skipped:
        raise ValueError(f"no intact checkpoint in {checkpoint_dir(run)}: all {len(skipped)} are broken; "
                         f"the newest: {skipped[0]}")
    return None


def load_checkpoint(path: Path) -> dict:
    """A checkpoint's content; ``path`` may be a run directory, its ``checkpoints/last`` or a file."""
    path = Path(path)
    if path.is_dir():  # a run directory or its checkpoints/ directory
        candidates = [checkpoint_dir(path) / LAST, path / LAST]
        path = next((c.resolve() for c in candidates if c.exists()), path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=False)


def load_policy(path: Path, robot_id: int | None = None,
                n_action_steps: int | None = None) -> tuple[Policy, dict]:
    """The trained policy (in eval mode) and the checkpoint it came from.

    A federated checkpoint may carry personal weights (``checkpoint["personal"]``: robot id ->
    the state-dict entries that stay local, such as a head); with ``robot_id`` those replace the
    shared ones. A robot without personal weights gets the shared policy. ``n_action_steps``
    replaces the spec's: how many actions of each predicted chunk run before the next prediction.
    """
    checkpoint = load_checkpoint(path)
    spec = PolicySpec(**checkpoint["policy_spec"])
    if n_action_steps is not None:
        spec = dataclasses.replace(spec, n_action_steps=n_action_steps)
    policy = make_policy(spec, checkpoint["stats"])
    state = dict(checkpoint["model"])
    if robot_id is not None:
        state.update(checkpoint.get("personal", {}).get(int(robot_id), {}))
    policy.load_state_dict(state)
    return policy.eval(), checkpoint
