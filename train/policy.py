"""The policy interface shared by training and evaluation, and the state-based MLP policy.

A ``Policy`` is an ``nn.Module`` that carries its own normalisation (buffers made
from the fleet statistics), so a checkpoint is enough to run it:

- ``forward(batch) -> loss``: a training batch in the layout of
  ``dataset.windows.FleetWindowDataset`` (``observation.*`` [B, n_obs_steps, ...],
  ``action`` [B, horizon, A], ``action_is_pad`` [B, horizon]).
- ``reset()``: forget the observation history and queued actions (call at episode start).
- ``select_action(observation) -> action``: one env observation dict (numpy) in, one
  action out. It predicts a chunk of ``horizon`` actions, executes the first
  ``n_action_steps`` of them one per call, then predicts again. A leading batch
  dimension runs B envs in lockstep (``[B, ...]`` in, ``[B, A]`` out); ``reset()``
  starts all of them afresh.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

STATE_FEATURES = ("observation.state", "observation.environment_state")


@dataclass
class PolicySpec:
    """What a policy is: its kind, window and sizes. Saved in every checkpoint."""

    kind: str = "mlp"
    n_obs_steps: int = 2
    horizon: int = 16
    n_action_steps: int = 8
    hidden: tuple[int, ...] = (256, 256)
    features: dict[str, list[int]] = field(default_factory=dict)  # input feature -> shape
    action_dim: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


class Normalizer(nn.Module):
    """``(x - mean) / std`` per dimension, with the statistics kept as buffers (saved with the weights)."""

    def __init__(self, mean: np.ndarray, std: np.ndarray):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32).reshape(-1))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32).reshape(-1).clamp_min(1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def inverse(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.std + self.mean


class Policy(nn.Module):
    """Observation history and action-chunk execution around ``predict_chunk`` (see the module docstring)."""

    def __init__(self, spec: PolicySpec):
        super().__init__()
        if not 1 <= spec.n_action_steps <= spec.horizon:
            raise ValueError(f"n_action_steps must be in 1..horizon ({spec.horizon}), got {spec.n_action_steps}")
        self.spec = spec
        self.reset()

    def predict_chunk(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """Actions [B, horizon, A] (unnormalised) for observation windows [B, n_obs_steps, ...]."""
        raise NotImplementedError

    def head_keys(self) -> list[str]:
        """The state-dict keys of the output head: what personalised federated learning keeps per robot."""
        raise NotImplementedError(f"{type(self).__name__} does not name its head")

    def reset(self) -> None:
        self._history: dict[str, deque] = {}
        self._queued: deque[np.ndarray] = deque()

    @torch.no_grad()
    def select_action(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        first = next(iter(self.spec.features))
        batched = np.ndim(observation[first]) > len(self.spec.features[first])
        for name in self.spec.features:
            history = self._history.setdefault(name, deque(maxlen=self.spec.n_obs_steps))
            value = np.asarray(observation[name], dtype=np.float32)
            value = value if batched else value[None]
            while len(history) < self.spec.n_obs_steps - 1:  # an episode's first frame pads the history
                history.append(value)
            history.append(value)
        if not self._queued:
            device = next(self.buffers()).device
            window = {name: torch.from_numpy(np.stack(h, axis=1)).to(device) for name, h in self._history.items()}
            chunk = self.predict_chunk(window).cpu().numpy()  # [B, horizon, A]
            self._queued.extend(chunk.transpose(1, 0, 2)[: self.spec.n_action_steps])
        action = self._queued.popleft()
        return action if batched else action[0]


class MLPPolicy(Policy):
    """State-based behaviour cloning: an MLP from the flattened observation window to an action chunk.

    Inputs are ``observation.state`` and ``observation.environment_state`` over
    ``n_obs_steps``, each normalised by its fleet mean and std; the output is the
    normalised action chunk. The loss is the mean squared error over the action
    steps that are not padding.
    """

    def __init__(self, spec: PolicySpec, stats: dict[str, dict[str, np.ndarray]]):
        super().__init__(spec)
        self.inputs = nn.ModuleDict({name.replace(".", "_"): Normalizer(stats[name]["mean"], stats[name]["std"])
                                     for name in spec.features})
        self.action = Normalizer(stats["action"]["mean"], stats["action"]["std"])
        width = spec.n_obs_steps * sum(int(np.prod(shape)) for shape in spec.features.values())
        layers: list[nn.Module] = []
        for hidden in spec.hidden:
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        layers.append(nn.Linear(width, spec.horizon * spec.action_dim))
        self.net = nn.Sequential(*layers)

    def _normalised_chunk(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = [self.inputs[name.replace(".", "_")](observations[name]).flatten(1) for name in self.spec.features]
        return self.net(torch.cat(inputs, dim=1)).unflatten(1, (self.spec.horizon, self.spec.action_dim))

    def predict_chunk(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.action.inverse(self._normalised_chunk(observations))

    def head_keys(self) -> list[str]:
        last = len(self.net) - 1
        return [key for key in self.state_dict() if key.startswith(f"net.{last}.")]

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        error = (self._normalised_chunk(batch) - self.action(batch["action"])).pow(2).mean(dim=2)
        valid = (~batch["action_is_pad"]).float()
        return (error * valid).sum() / valid.sum().clamp_min(1.0)


POLICIES = {"mlp": MLPPolicy}


def make_policy(spec: PolicySpec, stats: dict[str, dict[str, np.ndarray]]) -> Policy:
    """A policy of ``spec.kind`` with normalisation from ``stats``."""
    if spec.kind not in POLICIES:
        raise ValueError(f"unknown policy {spec.kind!r}; choose from {sorted(POLICIES)}")
    return POLICIES[spec.kind](spec, stats)
