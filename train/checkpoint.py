"""Checkpoints: weights in safetensors, their description in JSON, the resume state apart.

    RUN/checkpoints/step_00001000/
        model.safetensors    the weights evaluation runs (the EMA average where there is one), and
                             each robot's personal weights (federated) as ``personal.<robot>.<name>``
        checkpoint.json      policy spec, statistics, features, task, step, config, what the run
                             was trained on (train/identity.py), code version, and the sha256 and
                             size of the other two files
        training_state.pt    what only a resume reads: optimiser, scheduler, RNG states, epoch,
                             the EMA's trained weights, the gradient scaler, the federated server
    RUN/checkpoints/last     symlink to the newest one

**Loading never runs code from the files.** safetensors holds tensors only, JSON holds data
only, and ``training_state.pt`` is read with ``torch.load(weights_only=True)``, which rebuilds
tensors and plain containers and refuses anything else. A file whose sha256 differs from the
one recorded is refused: flipped weights are detected, not run. Every file is read bounded
(core/untrusted.py): only regular files inside the run (``last`` and links between its step
directories are fine), of the size recorded (older checkpoints record none: at most a quarter of
the machine's memory), ``checkpoint.json`` of at most ``MAX_DESCRIPTION`` bytes. A policy is
sized on the meta device before it is built (train/policies/budget.py). Checkpoints of the older
single-file pickle format (``step_*.pt``) are refused with a pointer to the one-time
conversion (``python -m train.convert_checkpoint RUN``).

A checkpoint is written into a hidden staging directory and renamed into place, and ``last``
moves only after that, so a crash at any moment leaves the previous checkpoint intact. Only
the newest ``keep`` are kept; a run started afresh (``--no-resume``) in an old run's
directory replaces the old run's checkpoints as it goes. A checkpoint damaged afterwards
(truncated, overwritten) is skipped: ``open_checkpoint RUN`` walks back from ``last`` to the
newest one that loads, with a one-line warning for each one skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from core.errors import one_line, warn
from core.untrusted import read_untrusted
from train.policies.budget import check_policy
from train.policies.policy import Policy, PolicySpec, make_policy

LAST = "last"
WEIGHTS, DESCRIPTION, TRAINING_STATE = "model.safetensors", "checkpoint.json", "training_state.pt"
FORMAT = "robofleet-checkpoint-2"
PERSONAL = "personal."
WALKS = 5  # how often newest_intact_checkpoint walks back through a run whose checkpoints vanish as they are read
MAX_DESCRIPTION = 64 * 2**20  # bytes of checkpoint.json: statistics and config, never this much
REQUIRED = {"format": str, "policy_spec": dict, "stats": dict, "features": dict, "step": int, "files": dict}
State = dict[str, torch.Tensor]


def checkpoint_dir(run: Path) -> Path:
    return Path(run) / "checkpoints"


def run_directory(path: Path) -> Path:
    """The run a checkpoint (a directory, or an old-format file) lies in: RUN for ``RUN/checkpoints/X``,
    else the checkpoint directory itself (an old file's folder). Its files must not link out of it."""
    path = Path(os.path.abspath(path))
    if path.parent.name == "checkpoints":
        return path.parent.parent
    return path if path.is_dir() else path.parent


def missing_fields(description) -> list[str]:
    """The ``REQUIRED`` fields that ``description`` (checkpoint.json's content) lacks or holds with another type."""
    return [key for key, kind in REQUIRED.items()
            if not isinstance(description, dict) or not isinstance(description.get(key), kind)]


def rng_state() -> dict:
    """Every RNG's state, as plain tensors, lists and numbers (what ``weights_only`` loading accepts)."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy": [name, keys.tolist(), position, has_gauss, cached],
            "python": random.getstate()}


def restore_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    random.setstate(state["python"])


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _old_format(path: Path) -> ValueError:
    return ValueError(f"{path} is a checkpoint in the old pickle format, which can run code when it is loaded; "
                      f"if you trust it, convert it once with `python -m train.convert_checkpoint {path}`")


@dataclass
class Checkpoint:
    """One checkpoint: the policy (spec, weights, statistics) and what it was trained on, plus the
    resume state (``training``, read only when asked for). ``format`` is ``robofleet`` for ours and
    ``lerobot`` for the description of a LeRobot ``pretrained_model`` (eval/lerobot_policy.py)."""

    spec: PolicySpec
    weights: State
    stats: dict[str, dict[str, np.ndarray]]
    features: dict
    step: int | None
    task: dict | None = None
    epoch: int = 0
    config: dict = field(default_factory=dict)
    data: str | None = None  # the training collection, relative to the repository
    more_data: list[str] = field(default_factory=list)  # stores it also trained on (fleet learning's rounds)
    identity: dict | None = None  # what the run was trained on (train/identity.py)
    collections: list[dict] = field(default_factory=list)  # every collection it trained on, in order: data, identity
    code_version: str | None = None
    personal: dict[int, State] = field(default_factory=dict)  # robot id -> the weights it keeps to itself
    training: dict | None = None
    weights_sha256: str | None = None  # of model.safetensors, as verified when read
    format: str = "robofleet"
    path: Path | None = None  # where it was read from

    @property
    def fleet_seed(self) -> int | None:
        """The fleet seed of the training collection, where the checkpoint records it."""
        return (self.identity or {}).get("seed")

    def policy(self, robot_id: int | None = None, n_action_steps: int | None = None,
               max_parameters: int | None = None) -> Policy:
        """The policy in eval mode: with ``robot_id``'s personal weights where it has some, and
        ``n_action_steps`` (actions of each predicted chunk run before the next prediction) if given.
        A one-line ``ValueError`` before it is built where it would have more than ``max_parameters``
        parameters (default: ``budget.default_max_parameters()``) or its weights do not fit it."""
        spec = self.spec if n_action_steps is None else dataclasses.replace(self.spec, n_action_steps=n_action_steps)
        weights = {**self.weights, **self.personal.get(robot_id, {})}
        self.check(weights, max_parameters, spec)
        policy = make_policy(spec, self.stats)
        policy.load_state_dict(weights)
        return policy.eval()

    def check(self, weights: State | None = None, max_parameters: int | None = None,
              spec: PolicySpec | None = None) -> None:
        """Refuse in one line, without building it, a policy that is too large or does not fit ``weights``
        (default: the shared ones); see ``train.policies.budget.check_policy``."""
        try:
            check_policy(spec or self.spec, self.stats, self.weights if weights is None else weights, max_parameters)
        except ValueError as error:
            raise ValueError(f"{self.path or 'the checkpoint'}: {error}") from None

    def description(self) -> dict:
        """checkpoint.json's content, less the files' checksums."""
        return {"format": FORMAT, "policy_spec": self.spec.to_dict(), "step": self.step, "epoch": self.epoch,
                "stats": {name: {k: np.asarray(v).tolist() for k, v in values.items()}
                          for name, values in self.stats.items()},
                "features": self.features, "task": self.task, "config": self.config, "data": self.data,
                "more_data": self.more_data, "identity": self.identity, "collections": self.collections,
                "code_version": self.code_version,
                "personal_robots": sorted(self.personal)}

    def write(self, directory: Path) -> Path:
        """Write the checkpoint as ``directory`` (new, or replaced whole), atomically; returns it."""
        directory = Path(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.", suffix=".tmp"))
        try:
            tensors = {**self.weights, **{f"{PERSONAL}{robot}.{name}": value for robot, state in self.personal.items()
                                          for name, value in state.items()}}
            # clone: safetensors refuses tensors that share memory (views, tied weights)
            files = {WEIGHTS: save_safetensors({k: v.detach().cpu().clone().contiguous() for k, v in tensors.items()})}
            if self.training is not None:
                buffer = io.BytesIO()
                torch.save(self.training, buffer)
                files[TRAINING_STATE] = buffer.getvalue()
            for name, data in files.items():
                (staging / name).write_bytes(data)
            description = {**self.description(),
                           "files": {name: {"sha256": _sha256(data), "bytes": len(data)}
                                     for name, data in files.items()}}
            (staging / DESCRIPTION).write_text(json.dumps(description, indent=1) + "\n")
            os.chmod(staging, 0o755)  # mkdtemp makes it private
            if directory.exists():  # a step this run writes again (--no-resume): swap the old one out
                old = directory.with_name(f".{directory.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                directory.rename(old)
                staging.rename(directory)
                shutil.rmtree(old)
            else:
                staging.rename(directory)
        except BaseException:  # a full disk, Ctrl-C: no half-written checkpoint left behind
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return directory

    @classmethod
    def read(cls, directory: Path, training: bool = False) -> Checkpoint:
        """The checkpoint in ``directory``, with its resume state if ``training``; a one-line ``ValueError``
        when it is missing, of the old pickle format, incomplete, damaged or not a checkpoint."""
        directory = Path(directory)
        if directory.is_file() and directory.suffix == ".pt":
            raise _old_format(directory)
        if not (directory / DESCRIPTION).is_file():
            raise ValueError(f"no checkpoint at {directory}" if not directory.exists()
                             else f"{directory} is not a RoboFleet checkpoint (a directory holding {DESCRIPTION})")
        data = read_untrusted(directory / DESCRIPTION, run_directory(directory), cap=MAX_DESCRIPTION)
        try:
            description = json.loads(data)
        except ValueError as error:
            raise ValueError(f"{directory / DESCRIPTION} is damaged, not JSON ({error})") from None
        wrong = missing_fields(description)
        if wrong or description["format"] != FORMAT:
            raise ValueError(f"{directory} is not a RoboFleet checkpoint: "
                             + (f"{DESCRIPTION} lacks {', '.join(wrong)}" if wrong
                                else f"its format is {description['format']!r}, not {FORMAT!r}"))
        tensors = _read_file(directory, WEIGHTS, description, load_safetensors)
        state = _read_file(directory, TRAINING_STATE, description, _load_weights_only) if training else None
        personal: dict[int, State] = {}
        for key in [key for key in tensors if key.startswith(PERSONAL)]:
            robot, name = key[len(PERSONAL):].split(".", 1)
            personal.setdefault(int(robot), {})[name] = tensors.pop(key)
        try:
            spec = PolicySpec.from_dict(description["policy_spec"])
        except TypeError as error:
            raise ValueError(f"{directory / DESCRIPTION} holds no policy spec RoboFleet knows: {error}") from None
        return cls(spec=spec, weights=tensors, personal=personal,
                   stats={name: {k: np.asarray(v, dtype=np.float32) for k, v in values.items()}
                          for name, values in description["stats"].items()},
                   features=description["features"], step=description["step"], task=description.get("task"),
                   epoch=description.get("epoch", 0), config=description.get("config") or {},
                   data=description.get("data"), more_data=_paths(description.get("more_data"), directory),
                   identity=description.get("identity"), collections=_collections(description, directory),
                   code_version=description.get("code_version"), training=state, path=directory.resolve(),
                   weights_sha256=_file_record(directory, WEIGHTS, description["files"][WEIGHTS])[0])

    def save(self, run: Path, keep: int = 3) -> Path:
        """Write this as the checkpoint of its step in ``run``, point ``last`` at it, prune old ones."""
        directory = checkpoint_dir(run)
        directory.mkdir(parents=True, exist_ok=True)
        path = self.write(directory / f"step_{self.step:08d}")
        link = directory / f".{LAST}.tmp"
        link.unlink(missing_ok=True)
        link.symlink_to(path.name)
        os.replace(link, directory / LAST)
        steps = _step_directories(run)
        for other in steps:
            if other.name > path.name:  # a later step: from a history this run abandoned (--no-resume)
                shutil.rmtree(other)
        for old in [other for other in steps if other.name <= path.name][:-keep]:
            shutil.rmtree(old)
        return path


def _paths(value, directory: Path) -> list[str]:
    """checkpoint.json's ``more_data``: a list of paths (none where absent), else a one-line ValueError."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(path, str) for path in value):
        raise ValueError(f"{directory / DESCRIPTION} is damaged: its more_data is not a list of paths")
    return value


def _collections(description: dict, directory: Path) -> list[dict]:
    """checkpoint.json's ``collections``; for a checkpoint written before it, the one collection it records."""
    value = description.get("collections")
    if value is None:
        recorded = description.get("data")
        return [{"data": recorded, "identity": description.get("identity")}] if recorded else []
    if not isinstance(value, list) or not all(isinstance(entry, dict) for entry in value):
        raise ValueError(f"{directory / DESCRIPTION} is damaged: its collections are not a list of records")
    return value


def _load_weights_only(data: bytes) -> dict:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _file_record(directory: Path, name: str, recorded) -> tuple[str, int | None]:
    """The sha256 and size (None: not recorded) ``checkpoint.json`` records for file ``name``."""
    # older checkpoints record the sha256 alone
    expected, size = (recorded, None) if isinstance(recorded, str) else (
        (recorded.get("sha256"), recorded.get("bytes")) if isinstance(recorded, dict) else (None, None))
    if not isinstance(expected, str) or not (size is None or type(size) is int):
        raise ValueError(f"{directory / DESCRIPTION} is damaged: its record of {name} is not a sha256 and a size")
    return expected, size


def _read_file(directory: Path, name: str, description: dict, decode):
    """One of the checkpoint's files, read bounded by its recorded size (``core.untrusted``), checked
    against its recorded sha256 and decoded; a one-line ValueError."""
    path = directory / name
    recorded = description["files"].get(name)
    if recorded is None:
        raise ValueError(f"{directory} has no {name}: it was not written for a resume" if name == TRAINING_STATE
                         else f"{directory / DESCRIPTION} records no checksum for {name}")
    expected, size = _file_record(directory, name, recorded)
    data = read_untrusted(path, run_directory(directory), size)
    if _sha256(data) != expected:
        raise ValueError(f"{path} is damaged: its sha256 does not match the one {DESCRIPTION} records")
    try:
        return decode(data)
    except Exception as error:  # safetensors and torch raise many kinds on foreign content
        raise ValueError(f"cannot read {path}: {one_line(error)}") from None


def _step_directories(run: Path) -> list[Path]:
    return sorted(path for path in checkpoint_dir(run).glob("step_*") if path.is_dir())


def latest_checkpoint(run: Path) -> Path | None:
    """The checkpoint ``RUN/checkpoints/last`` points at, if any."""
    last = checkpoint_dir(run) / LAST
    return last.resolve() if last.exists() else None


def _walk_back(run: Path, training: bool) -> tuple[Checkpoint | None, list[str], bool]:
    """``newest_intact_checkpoint``'s walk once: the checkpoint found (or None), why each one before it was
    skipped, and whether one vanished as it was read."""
    candidates = sorted(_step_directories(run), reverse=True)
    last = latest_checkpoint(run)
    if last is not None:  # a later one: written but not yet pointed at, or abandoned and not yet pruned
        candidates = [path for path in candidates if path.name <= last.name]
    skipped, vanished = [], False
    for path in candidates:
        try:
            return Checkpoint.read(path, training), skipped, vanished
        except ValueError as error:
            if not path.exists():  # pruned by its training run while it was read
                vanished = True
                continue
            skipped.append(str(error))
    return None, skipped, vanished


def newest_intact_checkpoint(run: Path, training: bool = False, quiet: bool = False) -> Checkpoint | None:
    """The newest checkpoint of ``run`` that ``Checkpoint.read`` accepts; None without any.

    The walk starts at the one ``last`` points at and goes back through the older ones (all
    of them, newest first, where ``last`` is gone), and warns in one line of each one
    skipped (unless ``quiet``). Where every checkpoint is broken, a ``ValueError`` says so in
    one line; a run holding only old-format checkpoints is refused with the conversion
    command. The walk depends only on the files, which no rank changes before every rank has
    loaded, so all ranks of a job pick the same one. A checkpoint that a training run prunes
    while it is read is gone, not broken: where the walk found none for that, it walks again.
    """
    if not _step_directories(run) and any(checkpoint_dir(run).glob("step_*.pt")):
        raise _old_format(Path(run))
    for _ in range(WALKS):
        checkpoint, skipped, vanished = _walk_back(run, training)
        if checkpoint is not None or not vanished:
            break
    if checkpoint is not None:
        if not quiet:
            for reason in skipped:
                warn(f"skipped a broken checkpoint: {reason}")
        return checkpoint
    if skipped:
        raise ValueError(f"no intact checkpoint in {checkpoint_dir(run)}: all {len(skipped)} are broken; "
                         f"the newest: {skipped[0]}")
    return None


def open_checkpoint(path: Path | str, training: bool = False, quiet: bool = False) -> Checkpoint:
    """The checkpoint at ``path``: a run directory or its checkpoints/ (the newest intact one, see
    ``newest_intact_checkpoint``), ``last``, or one checkpoint directory. A one-line ``ValueError``
    where there is none or it cannot be read."""
    path = Path(path)
    if path.is_dir() and not (path / DESCRIPTION).exists():
        run = path.parent if path.name == "checkpoints" else path
        found = newest_intact_checkpoint(run, training, quiet)
        if found is None:
            raise ValueError(f"no checkpoint at {path}")
        return found
    return Checkpoint.read(path.resolve() if path.is_symlink() else path, training)


def load_policy(path: Path | str, robot_id: int | None = None, n_action_steps: int | None = None,
                max_parameters: int | None = None) -> tuple[Policy, Checkpoint]:
    """The trained policy at ``path`` (see ``open_checkpoint``) in eval mode, and its checkpoint;
    ``robot_id``, ``n_action_steps`` and ``max_parameters`` as for ``Checkpoint.policy``."""
    checkpoint = open_checkpoint(path)
    return checkpoint.policy(robot_id, n_action_steps, max_parameters), checkpoint
