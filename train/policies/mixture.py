"""A Gaussian-mixture action head: behaviour cloning for demonstrations that branch.

Regressing an action chunk with the mean squared error learns the average of what the
demonstrations did. Where they split (the expert turns the gripper either way to square
it with a cube whose faces sit near 45 degrees; it passes an obstacle left or right), the
average is neither branch, and a unimodal policy stalls between them. ``MixtureHead``
instead reads the network's output as ``modes`` Gaussians over the whole chunk (the
approach of robomimic's GMM policies):

- ``modes`` mixture logits, then per mode a mean and a standard deviation for every
  action of the chunk (softplus, at least ``MIN_STD``): ``modes * (2 * horizon * A + 1)``
  outputs in all;
- the loss is the chunk's negative log-likelihood under the mixture, over the steps that
  are not padding, divided by the number of action values per chunk;
- acting takes the mean of the likeliest mode: deterministic, and always one branch.

Everything is in normalised action units.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.distributions import Normal

MIN_STD = 1e-3  # normalised units; keeps the likelihood finite where a mode fits its demonstrations exactly


class MixtureHead:
    """Reads [B, outputs] head outputs as a mixture of ``modes`` Gaussians over [horizon, A] chunks."""

    def __init__(self, modes: int, horizon: int, action_dim: int):
        self.modes, self.horizon, self.action_dim = modes, horizon, action_dim

    @property
    def outputs(self) -> int:
        return self.modes * (2 * self.horizon * self.action_dim + 1)

    def split(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits [B, modes], means and standard deviations [B, modes, horizon, A]."""
        logits = raw[:, :self.modes]
        moments = raw[:, self.modes:].unflatten(1, (self.modes, 2, self.horizon, self.action_dim))
        return logits, moments[:, :, 0], F.softplus(moments[:, :, 1]) + MIN_STD

    def loss(self, raw: torch.Tensor, target: torch.Tensor, is_pad: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood of ``target`` [B, horizon, A] chunks, padding [B, horizon] left out."""
        logits, means, stds = self.split(raw)
        valid = (~is_pad).to(means.dtype)[:, None, :, None]  # [B, 1, horizon, 1]
        log_likelihood = (Normal(means, stds).log_prob(target[:, None]) * valid).sum(dim=(2, 3))  # [B, modes]
        chunk_log_likelihood = torch.logsumexp(F.log_softmax(logits, dim=1) + log_likelihood, dim=1)
        return -chunk_log_likelihood.mean() / (self.horizon * self.action_dim)

    def likeliest(self, raw: torch.Tensor) -> torch.Tensor:
        """The mean chunk [B, horizon, A] of each sample's likeliest mode."""
        logits, means, _ = self.split(raw)
        return means[torch.arange(len(means), device=means.device), logits.argmax(dim=1)]
