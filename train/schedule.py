"""How the weights are updated: the optimiser, and the learning-rate schedules shared by
train/bc.py (per step) and train/federated.py (per round)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


def adamw(parameters: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.01) -> torch.optim.AdamW:
    """torch's AdamW over the parameters that require gradients, with its fused kernel.

    The fused kernel updates every tensor in one call, on CPUs as on GPUs, where the
    default loops over the tensors, several kernels each (docs/performance.md).
    """
    return torch.optim.AdamW([p for p in parameters if p.requires_grad], lr=lr, weight_decay=weight_decay,
                             fused=True)


def learning_rate_factor(step: int, warmup_steps: int, max_steps: int) -> float:
    """Linear warmup to 1, then cosine decay to 0.1 at ``max_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


class Schedule:
    """train/bc.py's learning-rate factor at each step: ``learning_rate_factor`` over ``max_steps``.

    A run resumed with another ``--max-steps`` calls ``extend``: from the step it resumes at,
    the factor carries on from the value it had reached and decays by cosine to 0.1 at the
    new end, so the learning rate never jumps. LambdaLR saves a callable object's attributes
    with its state (and restores them on load), so a checkpoint keeps the schedule it trained on.
    """

    def __init__(self, warmup_steps: int, max_steps: int):
        self.warmup_steps, self.max_steps = warmup_steps, max_steps
        self.anchor: tuple[int, float] | None = None  # (step, factor) where an extended schedule starts

    def __call__(self, step: int) -> float:
        if self.anchor is None or step < self.anchor[0]:
            return learning_rate_factor(step, self.warmup_steps, self.max_steps)
        start, factor = self.anchor
        progress = min(1.0, (step - start) / max(1, self.max_steps - start))
        return 0.1 + (factor - 0.1) * 0.5 * (1 + math.cos(math.pi * progress))

    def extend(self, step: int, max_steps: int) -> None:
        """End at ``max_steps`` instead, carrying on smoothly from ``step``."""
        self.restart(step, max_steps, self(step))

    def restart(self, step: int, max_steps: int, factor: float) -> None:
        """From ``step``, start again at ``factor`` and decay by cosine to 0.1 at ``max_steps`` (a warm restart)."""
        self.anchor, self.max_steps = (step, factor), max_steps


def scaled_learning_rate(lr: float, rule: str, effective_batch: int, base_batch: int) -> float:
    """``lr``, meant for ``base_batch``, scaled to ``effective_batch``: none, linear or sqrt in the ratio."""
    ratio = effective_batch / base_batch
    return lr * {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[rule]
