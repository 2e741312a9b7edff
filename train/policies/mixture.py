"""A Gaussian-mixture action head: behaviour cloning for demonstrations that branch.

Regressing an action chunk with the mean squared error learns the average of what the
demonstrations did. Where they split (the expert turns the gripper either way to square
it with a cube whose faces sit near 45 degrees; it passes an obstacle left or right), the
average is neither branch, and a unimodal policy stalls between them. ``MixtureHead``
instead reads the network's output as ``modes`` Gaussians over the whole chunk:

- ``modes`` mixture logits, then a mean for every action of the chunk per mode:
  ``modes * (horizon * A + 1)`` outputs in all;
- every mode has unit variance in normalised action units. The spread is not learned: with
  a learned one the likelihood settles for wide Gaussians around loose means. On pick_place
  such a head's likeliest chunk had 2.4x the regressing cnn's squared error on its own
  training windows, and it placed 1 cube in 500. Unit variance keeps the modes to differences that span the
  chunk (a turn one way or the other), not the expert's step-to-step noise;
- the loss is the chunk's negative log-likelihood under the mixture, over the steps that
  are not padding, divided by the number of action values per chunk (constants dropped):
  with one mode in charge it is half the mean squared error, plus its -log weight;
- acting takes the mean of the likeliest mode: deterministic, and always one branch;
- ``spanned`` limits the modes to some action dimensions (``--mode-actions``); the others
  get one mean per chunk that every mode shares, so the modes split only where those
  dimensions branch. Over the whole chunk the largest differences between demonstrations
  can lie elsewhere: on pick_place, two modes over every dimension also split on when the
  fingers close.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class MixtureHead:
    """Reads [B, outputs] head outputs as a mixture of ``modes`` unit-variance Gaussians over [horizon, A] chunks."""

    def __init__(self, modes: int, horizon: int, action_dim: int, spanned: tuple[int, ...] = ()):
        self.modes, self.horizon, self.action_dim = modes, horizon, action_dim
        self.spanned = sorted(spanned) if spanned else list(range(action_dim))
        self.shared = [d for d in range(action_dim) if d not in self.spanned]
        self.order = torch.argsort(torch.tensor(self.spanned + self.shared))  # back to the action's order

    @property
    def outputs(self) -> int:
        return self.modes * (self.horizon * len(self.spanned) + 1) + self.horizon * len(self.shared)

    def split(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [B, modes] and means [B, modes, horizon, A] (the shared dimensions the same in every mode)."""
        own_end = self.modes + self.modes * self.horizon * len(self.spanned)
        own = raw[:, self.modes:own_end].unflatten(1, (self.modes, self.horizon, len(self.spanned)))
        shared = raw[:, own_end:].unflatten(1, (self.horizon, len(self.shared)))
        means = torch.cat([own, shared[:, None].expand(-1, self.modes, -1, -1)], dim=3)[..., self.order.to(raw.device)]
        return raw[:, :self.modes], means

    def loss(self, raw: torch.Tensor, target: torch.Tensor, is_pad: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood of ``target`` [B, horizon, A] chunks, padding [B, horizon] left out."""
        logits, means = self.split(raw)
        valid = (~is_pad).to(means.dtype)[:, None, :, None]  # [B, 1, horizon, 1]
        log_likelihood = -0.5 * ((means - target[:, None]).pow(2) * valid).sum(dim=(2, 3))  # [B, modes]
        chunk_log_likelihood = torch.logsumexp(F.log_softmax(logits, dim=1) + log_likelihood, dim=1)
        return -chunk_log_likelihood.mean() / (self.horizon * self.action_dim)

    def likeliest(self, raw: torch.Tensor) -> torch.Tensor:
        """The mean chunk [B, horizon, A] of each sample's likeliest mode."""
        logits, means = self.split(raw)
        return means[torch.arange(len(means), device=means.device), logits.argmax(dim=1)]
