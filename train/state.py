"""What train/bc.py's updates change and a resume restores: the weights, the optimiser and its
learning-rate schedule, the gradient scaler and the EMA, with the step they have reached.

A run saves them as a ``Checkpoint`` (train/checkpoint.py): the weights evaluation runs in
``model.safetensors``, the rest in the resume state; ``resume_from`` picks the checkpoint a
run carries on from and ``TrainingState.resume`` loads it.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, ContextManager

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from core.errors import warn
from dataset import FleetStore
from train.checkpoint import Checkpoint, newest_intact_checkpoint, restore_rng_state, rng_state
from train.config import OptimConfig, TrainConfig, flat_options
from train.data import selected_episodes, store_policy_spec
from train.identity import check_resume, data_identity
from train.policies.policy import Policy, PolicySpec, changed_spec_fields
from train.schedule import Schedule, adamw, scaled_learning_rate


@dataclass
class TrainingState:
    """The policy and everything an update changes besides it (see the module docstring)."""

    policy: Policy
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    ema: AveragedModel | None
    ema_decay: float
    autocast: Callable[[], ContextManager]  # mixed precision (--amp) around the forward passes
    step: int = 0

    @classmethod
    def create(cls, policy: Policy, optim: OptimConfig, device: torch.device, effective_batch: int) -> TrainingState:
        """A fresh state for ``policy`` on ``device``: AdamW at ``--lr`` scaled to ``effective_batch``
        (``--lr-scaling``), warmup and cosine decay over ``--max-steps``, ``--amp``, ``--ema-decay``."""
        lr = scaled_learning_rate(optim.lr, optim.lr_scaling, effective_batch, optim.base_batch)
        optimizer = adamw(policy.parameters(), lr=lr, weight_decay=optim.weight_decay)
        schedule = Schedule(optim.warmup_steps, optim.max_steps)
        ema = None
        if optim.ema_decay > 0:
            ema = AveragedModel(policy, multi_avg_fn=get_ema_multi_avg_fn(optim.ema_decay), use_buffers=True)
        autocast = functools.partial(torch.autocast, device.type, enabled=optim.amp != "none",
                                     dtype=torch.float16 if optim.amp == "fp16" else torch.bfloat16)
        scaler = torch.amp.GradScaler(device.type, enabled=optim.amp == "fp16")  # fp16 gradients would underflow
        return cls(policy, optimizer, schedule, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule), scaler, ema,
                   optim.ema_decay, autocast)

    @property
    def evaluated(self) -> torch.nn.Module:
        """What validation and evaluation run: the EMA's average where there is one, else the policy."""
        return self.ema.module if self.ema is not None else self.policy

    @property
    def lr(self) -> float:
        """The peak learning rate: a resumed run's is its checkpoint's, even if the world size changed."""
        return self.scheduler.base_lrs[0]

    def resume(self, checkpoint: Checkpoint, max_steps: int, until: int, rewarm: float) -> str:
        """Carry on from ``checkpoint`` (read with its resume state), to ``max_steps`` (``--max-steps``).

        ``rewarm`` > 0 restarts the learning rate at that share of its peak, decaying to 10% at
        ``until``; else a ``max_steps`` other than the checkpoint's extends or shortens its schedule.
        Returns the start line's note on the schedule ('' where it carries on unchanged).
        """
        training = checkpoint.training
        # With an EMA, the weights hold the average (evaluation runs it) and "ema" the trained weights.
        self.policy.load_state_dict(training.get("ema", {}).get("trained_model", checkpoint.weights))
        if self.ema is not None and "ema" in training:  # else the average starts afresh from these weights
            self.ema.module.load_state_dict(checkpoint.weights)
            self.ema.n_averaged.fill_(training["ema"]["updates"])
        if self.scaler.is_enabled() and "scaler" in training:
            self.scaler.load_state_dict(training["scaler"])
        self.optimizer.load_state_dict(training["optimizer"])
        # the checkpoint's end (a run's before the groups saved its options flat); restored below where saved
        self.schedule.max_steps = flat_options(checkpoint.config).get("max_steps", max_steps)
        self.scheduler.load_state_dict(training["scheduler"])
        restore_rng_state(training["rng"])
        self.step = checkpoint.step
        if rewarm:
            self.schedule.restart(self.step, until, rewarm)
            return f" (the learning rate restarts at {self.lr * rewarm:.3g} and decays to 10% at step {until})"
        if self.schedule.max_steps == max_steps:
            return ""
        note = (f" (--max-steps {max_steps}, was {self.schedule.max_steps}: the learning rate carries on from "
                f"{self.lr * self.schedule(self.step):.3g} and decays to 10% at the new end)")
        self.schedule.extend(self.step, max_steps)
        return note

    def checkpoint(self, **description) -> Checkpoint:
        """This state as a checkpoint of its step, described by ``description`` (``Checkpoint``'s other fields)."""
        training = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                    "rng": rng_state()}
        if self.ema is not None:
            training["ema"] = {"decay": self.ema_decay, "updates": int(self.ema.n_averaged),
                               "trained_model": self.policy.state_dict()}
        if self.scaler.is_enabled():
            training["scaler"] = self.scaler.state_dict()
        return Checkpoint(weights=self.evaluated.state_dict(), step=self.step, training=training, **description)


def check_resumable(config: TrainConfig, store: FleetStore) -> None:
    """What ``resume_from`` will check, checked before a command writes anything: the run in ``config.out``
    (if any) has an intact checkpoint with its resume state, and it can carry on with ``config`` on ``store``.
    A one-line ``ValueError`` otherwise (train/fleet_learn.py and train/distill.py deploy and roll out
    before they train: a refusal must come first)."""
    resume_from(config, store_policy_spec(config.policy, store),
                data_identity(store, selected_episodes(store, config.data)), quiet=True)


def resume_from(config: TrainConfig, spec: PolicySpec, identity: dict, quiet: bool) -> Checkpoint | None:
    """The checkpoint (with its resume state) that the run in ``config.out`` carries on from; None to start afresh.

    Every rank walks the same files to the same checkpoint; unless ``quiet`` (rank 0), it warns
    of those it skips and says what the resume changes. What the checkpoint cannot carry on
    (other policy options, data or optimisation options: train/identity.py) is a one-line ``ValueError``.
    """
    run = Path(config.out)
    try:
        checkpoint = newest_intact_checkpoint(run, training=True, quiet=quiet) if config.resume else None
    except ValueError as error:
        raise ValueError(f"{error}; --no-resume starts afresh") from None
    if checkpoint is None:
        return None
    try:  # the data first: another task's store also changes the policy's spec
        notes = check_resume(flat_options(checkpoint.config), checkpoint.identity, flat_options(asdict(config)),
                             identity, config.allow_new_data)
    except ValueError as error:
        raise ValueError(f"cannot resume {run}: {error}") from None
    if changed := changed_spec_fields(checkpoint.spec, spec):
        raise ValueError(f"{run} holds a policy trained with other options ({changed}); rerun with the same "
                         "options, or --no-resume to start afresh")
    for note in [] if quiet else notes:
        warn(note)
    return checkpoint
