"""The policy interface shared by training and evaluation, and the state-based MLP policy.

A ``Policy`` is an ``nn.Module`` that carries its own normalisation (buffers made
from the fleet statistics), so a checkpoint is enough to run it:

- ``forward(batch) -> loss``: a training batch in the layout of
  ``dataset.windows.FleetWindowDataset`` (``observation.*`` [B, n_obs_steps, ...],
  images uint8 [B, n_obs_steps, H, W, C] as stored, ``action`` [B, horizon, A],
  ``action_is_pad`` [B, horizon]).
- ``reset()``: forget the observation history and queued actions (call at episode start).
- ``select_action(observation) -> action``: one env observation dict (numpy) in, one
  action out. It predicts a chunk of actions, executes the first ``n_action_steps``
  of them one per call, then predicts again. A leading batch dimension runs B envs in
  lockstep (``[B, ...]`` in, ``[B, A]`` out); ``reset()`` starts all of them afresh.

Camera images reach the policy as uint8 [..., H, W, 3], from the loader and from the
env alike, and ``normalised`` turns them into float [..., C, H, W] on the policy's
device, with the random shift and colour jitter of ``train/augment.py`` in training
mode only (``spec.image_shift``, ``spec.colour_jitter``).

What a policy sees is its ``inputs`` (``dataset.inputs.INPUTS``: ``state``,
``proprio+cameras``, ``cameras``, ``state+cameras``), saved in its spec. On a multi-task
store the task is an input too: ``task_index`` (int64 [1], an index into the store's task
list, not normalised) is one of ``spec.features``, and ``normalised`` turns it into a one-hot
over ``spec.task_count`` tasks appended to ``observation.state``, so every kind that reads the
state reads the task the same way.

The kinds (``POLICIES``): ``mlp`` (here), ``cnn`` (train/policies/vision.py), and LeRobot's
``act`` and ``diffusion`` (train/policies/lerobot_policies.py). ``policy_spec`` picks a kind's
inputs from a store's features; ``make_policy`` builds it.
"""

from __future__ import annotations

import importlib
import json
from collections import deque
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from dataset.inputs import INPUTS, PROPRIO_FEATURE, TASK_FEATURE, camera_names, is_image, select_inputs
from train.augment import images_to_model
from train.policies.mixture import MixtureHead
from train.policies.options import PolicyOptions

POLICIES = {  # kind -> "module:class", imported when used (lerobot takes seconds to import)
    "mlp": "train.policies.policy:MLPPolicy",
    "cnn": "train.policies.vision:CNNPolicy",
    "act": "train.policies.lerobot_policies:ACTAdapter",
    "diffusion": "train.policies.lerobot_policies:DiffusionAdapter",
}


@dataclass
class PolicySpec:
    """What a policy is: its kind, window and sizes. Saved (as a plain dict) in every checkpoint.

    ``features`` maps each input to its shape as the model sees it (images as [C, H, W]).
    ``action_start`` is the first action's offset from the current frame in a training
    window (diffusion's window starts ``n_obs_steps - 1`` frames back). ``options`` holds
    kind-specific settings (cnn: its vision backbone; act/diffusion: LeRobot config fields).
    ``inputs`` names the choice ``features`` was made by; ``image_shift`` and
    ``colour_jitter`` are the training augmentation of the images. ``action_modes`` is
    the mlp and cnn head: 1 regresses the chunk, more fit a mixture (train/policies/mixture.py)
    over the action dimensions ``mode_actions`` (empty: all). ``task_count`` is the number of
    tasks a multi-task policy reads ``task_index`` over (0: one task, no task input).
    """

    kind: str = "mlp"
    n_obs_steps: int = 2
    horizon: int = 16
    n_action_steps: int = 8
    hidden: tuple[int, ...] = (256, 256)
    features: dict[str, list[int]] = field(default_factory=dict)  # input feature -> shape
    action_dim: int = 0
    action_start: int = 0
    options: dict = field(default_factory=dict)
    inputs: str = "state"
    image_shift: int = 0
    colour_jitter: float = 0.0
    action_modes: int = 1
    mode_actions: tuple[int, ...] = ()
    task_count: int = 0

    @property
    def normalised_features(self) -> list[str]:
        """The inputs normalised by the fleet statistics: all but the task index, which is categorical."""
        return [name for name in self.features if name != TASK_FEATURE]

    def model_features(self) -> dict[str, list[int]]:
        """Each input's shape as the model sees it after ``Policy.normalised``: the task, one-hot over
        ``task_count`` tasks, widens ``observation.state`` and is no input of its own."""
        shapes = {name: list(self.features[name]) for name in self.normalised_features}
        if self.task_count:
            shapes[PROPRIO_FEATURE][-1] += self.task_count
        return shapes

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> PolicySpec:
        """The spec ``to_dict`` gave, also after a JSON round trip (which turns tuples into lists)."""
        tuples = {f.name for f in fields(cls) if isinstance(f.default, tuple)}
        return cls(**{name: tuple(value) if name in tuples else value for name, value in values.items()})


def changed_spec_fields(old: PolicySpec, new: PolicySpec) -> str:
    """``name: old -> new`` for each field the two specs disagree on ('' when they agree), as JSON sees them."""
    before, after = json.loads(json.dumps(old.to_dict())), json.loads(json.dumps(new.to_dict()))
    return ", ".join(f"{name}: {before[name]} -> {after[name]}" for name in before if before[name] != after[name])


class Normalizer(nn.Module):
    """``(x - mean) / std`` with the statistics kept as buffers (saved with the weights).

    The buffers keep the statistics' shape: (D,) for vectors, (C, 1, 1) for images.
    ``Normalizer.of(stats, mode)`` builds LeRobot's modes: ``mean_std``; ``min_max``
    (to [-1, 1]); ``identity``.
    """

    def __init__(self, mean: np.ndarray, std: np.ndarray):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean), dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(np.asarray(std), dtype=torch.float32).clamp_min(1e-6))

    @classmethod
    def of(cls, stats: dict[str, np.ndarray], mode: str = "mean_std") -> Normalizer:
        if mode == "mean_std":
            return cls(stats["mean"], stats["std"])
        if mode == "min_max":
            low, high = np.asarray(stats["min"]), np.asarray(stats["max"])
            return cls((high + low) / 2, (high - low) / 2)
        if mode == "identity":
            return cls(np.zeros_like(stats["mean"]), np.ones_like(stats["mean"]))
        raise ValueError(f"unknown normalisation mode {mode!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def inverse(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.std + self.mean


def module_key(feature: str) -> str:
    """A feature name as a module name (no dots)."""
    return feature.replace(".", "_")


class Policy(nn.Module):
    """Normalisation, observation history and action-chunk execution (see the module docstring).

    Subclasses implement ``forward`` and ``predict_chunk`` and name their ``head_keys``.
    ``normalisation`` maps a feature (or ``action``) to its ``Normalizer.of`` mode
    (default ``mean_std``).
    """

    images = "none"  # camera inputs: "none", "optional" (used when the store has them) or "required"
    mixture_head = False  # whether --action-modes above 1 is open to this kind

    def __init__(self, spec: PolicySpec, stats: dict[str, dict[str, np.ndarray]],
                 normalisation: dict[str, str] | None = None):
        super().__init__()
        if not 1 <= spec.n_action_steps <= spec.horizon + spec.action_start:
            raise ValueError(f"--n-action-steps must be in 1..{spec.horizon + spec.action_start} for {spec.kind} "
                             f"(horizon {spec.horizon}), got {spec.n_action_steps}")
        self.spec = spec
        modes = normalisation or {}
        self.normalisation = {name: modes.get(name, "mean_std") for name in [*spec.normalised_features, "action"]}
        self.inputs = nn.ModuleDict({module_key(name): Normalizer.of(stats[name], self.normalisation[name])
                                     for name in spec.normalised_features})
        self.action = Normalizer.of(stats["action"], self.normalisation["action"])
        self.reset()

    @classmethod
    def options(cls, options: PolicyOptions) -> dict:
        """Kind-specific ``PolicySpec`` fields (``options``, ``action_start``), from the kind's own group of
        ``options`` where it has one (train/policies/options.py)."""
        return {}

    @classmethod
    def check_inputs(cls, inputs: str, features: dict[str, list[int]]) -> None:
        """Raise ValueError, naming the fix, if this kind cannot run on ``features`` (chosen by ``inputs``)."""

    def normalised(self, observations: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The inputs of ``spec.features``, each normalised by its fleet statistics, in the shapes of
        ``spec.model_features()``.

        Images come in as uint8 [..., H, W, C] and leave as float [..., C, H, W], augmented
        in training mode; the task index leaves as a one-hot at the end of ``observation.state``
        (see the module docstring).
        """
        normalised = {}
        for name in self.spec.normalised_features:
            value = observations[name]
            if is_image(name):
                value = images_to_model(value, *((self.spec.image_shift, self.spec.colour_jitter) if self.training
                                                 else (0, 0.0)))
            normalised[name] = self.inputs[module_key(name)](value)
        if self.spec.task_count:
            state = normalised[PROPRIO_FEATURE]
            task = F.one_hot(observations[TASK_FEATURE].long().squeeze(-1), self.spec.task_count).to(state.dtype)
            normalised[PROPRIO_FEATURE] = torch.cat([state, task], dim=-1)
        return normalised

    def predict_chunk(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """Actions [B, >= n_action_steps, A] (unnormalised), from the current frame on, for
        observation windows [B, n_obs_steps, ...]."""
        raise NotImplementedError

    @property
    def chunk_length(self) -> int:
        """How many actions ``predict_chunk`` returns."""
        return self.spec.horizon

    def head_keys(self) -> list[str]:
        """The state-dict keys of the output head: what personalised federated learning keeps per robot."""
        raise NotImplementedError(f"{type(self).__name__} does not name its head")

    def reset(self) -> None:
        self._history: dict[str, deque] = {}
        self._queued: deque[np.ndarray] = deque()

    def observe(self, observation: dict[str, np.ndarray]) -> bool:
        """Add one frame (one robot's, or a batch's [B, ...]) to the observation history; whether it is batched."""
        first = next(iter(self.spec.features))
        batched = np.ndim(observation[first]) > len(self.spec.features[first])
        for name in self.spec.features:
            history = self._history.setdefault(name, deque(maxlen=self.spec.n_obs_steps))
            value = self.frame(name, observation[name])
            value = value if batched else value[None]
            while len(history) < self.spec.n_obs_steps - 1:  # an episode's first frame pads the history
                history.append(value)
            history.append(value)
        return batched

    @staticmethod
    def frame(name: str, value) -> np.ndarray:
        """A frame of input ``name`` in the dtype the model takes: uint8 for images, int64 for the task index,
        float32 otherwise."""
        dtype = np.uint8 if is_image(name) else np.int64 if name == TASK_FEATURE else np.float32
        return np.asarray(value, dtype=dtype)

    @torch.no_grad()
    def predict_windows(self, windows: dict[str, np.ndarray]) -> np.ndarray:
        """The action chunks [B, steps, A] for observation windows [B, n_obs_steps, ...]: numpy in, numpy out."""
        device = next(self.buffers()).device
        return self.predict_chunk({name: torch.from_numpy(window).to(device)
                                   for name, window in windows.items()}).cpu().numpy()

    def select_action(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        batched = self.observe(observation)
        if not self._queued:
            chunk = self.predict_windows({name: np.stack(h, axis=1) for name, h in self._history.items()})
            self._queued.extend(chunk.transpose(1, 0, 2)[: self.spec.n_action_steps])
        action = self._queued.popleft()
        return action if batched else action[0]


def masked_mean(error: torch.Tensor, is_pad: torch.Tensor) -> torch.Tensor:
    """The mean of per-step errors [B, steps] over the steps that are not padding."""
    valid = (~is_pad).float()
    return (error * valid).sum() / valid.sum().clamp_min(1.0)


class MLPPolicy(Policy):
    """State-based behaviour cloning: an MLP from the flattened observation window to an action chunk.

    Inputs are ``observation.state`` and ``observation.environment_state`` over
    ``n_obs_steps``, each normalised by its fleet mean and std; the output is the
    normalised action chunk. The loss is the mean squared error over the action
    steps that are not padding; with ``spec.action_modes`` above 1 the output is a
    mixture of that many Gaussians over the chunk instead, fitted by its likelihood,
    and the policy acts on its likeliest mode (``MixtureHead``). Subclasses change the
    inputs through ``encode`` and ``encoded_width``.
    """

    mixture_head = True

    def __init__(self, spec: PolicySpec, stats: dict[str, dict[str, np.ndarray]]):
        super().__init__(spec, stats)
        self.mixture = (MixtureHead(spec.action_modes, spec.horizon, spec.action_dim, tuple(spec.mode_actions))
                        if spec.action_modes > 1 else None)
        width = self.encoded_width()
        layers: list[nn.Module] = []
        for hidden in spec.hidden:
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        layers.append(nn.Linear(width, self.mixture.outputs if self.mixture else spec.horizon * spec.action_dim))
        self.net = nn.Sequential(*layers)

    def encoded_width(self) -> int:
        """The width of ``encode``'s output."""
        return self.spec.n_obs_steps * sum(int(np.prod(shape)) for shape in self.spec.model_features().values())

    def encode(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Normalised observation windows -> one vector [B, encoded_width] per sample."""
        return torch.cat([inputs[name].flatten(1) for name in self.spec.model_features()], dim=1)

    def _head(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(self.encode(self.normalised(observations)))

    def _normalised_chunk(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        raw = self._head(observations)
        if self.mixture:
            return self.mixture.likeliest(raw)
        return raw.unflatten(1, (self.spec.horizon, self.spec.action_dim))

    def predict_chunk(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.action.inverse(self._normalised_chunk(observations))

    def head_keys(self) -> list[str]:
        last = len(self.net) - 1
        return [key for key in self.state_dict() if key.startswith(f"net.{last}.")]

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.mixture:
            return self.mixture.loss(self._head(batch), self.action(batch["action"]), batch["action_is_pad"])
        error = (self._normalised_chunk(batch) - self.action(batch["action"])).pow(2).mean(dim=2)
        return masked_mean(error, batch["action_is_pad"])


def policy_class(kind: str) -> type[Policy]:
    if kind not in POLICIES:
        raise ValueError(f"unknown policy {kind!r}; choose from {sorted(POLICIES)}")
    module, name = POLICIES[kind].split(":")
    return getattr(importlib.import_module(module), name)


def policy_spec(options: PolicyOptions, store_features: dict[str, dict], task_count: int = 0,
                task_features: dict[str, dict] | None = None) -> PolicySpec:
    """The spec of ``options.policy`` on a store with ``store_features`` and ``task_count`` tasks
    (0 for a single-task store; more: ``task_index`` is an input too, unless ``options.task_input`` is off),
    whose tasks record ``task_features``
    each in their own shape (``FleetStore.task_features``; inputs that read one are refused).

    ``options.inputs`` picks the features (``INPUTS``; ``auto``: ``proprio+cameras`` for
    cnn, and for act and diffusion on a store with cameras, else ``state``; the features through
    ``dataset.inputs.select_inputs``), cameras as [C, H, W]. Raises ValueError, naming the fix,
    for an unknown kind, inputs the kind cannot take, or inputs the store cannot feed.
    """
    cls = policy_class(options.policy)
    task_count = task_count if options.task_input else 0  # --no-task-input: the tasks are told from what it sees
    inputs = options.inputs
    if inputs == "auto":
        wants_cameras = cls.images == "required" or (cls.images == "optional" and camera_names(store_features))
        inputs = "proprio+cameras" if wants_cameras else "state"
    takes_cameras = INPUTS[inputs][1]
    if takes_cameras and cls.images == "none":
        raise ValueError(f"--inputs {inputs} needs an image policy: {options.policy} takes no camera images "
                         "(use --policy cnn, act or diffusion)")
    if not takes_cameras and cls.images == "required":
        raise ValueError(f"the {options.policy} policy needs camera images, which --inputs {inputs} leaves out "
                         "(use --inputs proprio+cameras)")
    features = {name: _model_shape(name, store_features[name]["shape"])
                for name in select_inputs(inputs, store_features, task_features)}
    if task_count:  # the task's one-hot goes beside the state (Policy.normalised)
        if PROPRIO_FEATURE not in features:
            raise ValueError(f"a policy of many tasks reads its task beside {PROPRIO_FEATURE}, which --inputs "
                             f"{inputs} leaves out (use --inputs state or proprio+cameras)")
        features[TASK_FEATURE] = list(store_features[TASK_FEATURE]["shape"])
    cls.check_inputs(inputs, features)
    if options.action_modes > 1 and not cls.mixture_head:
        raise ValueError(f"--action-modes is for the mlp and cnn heads; {options.policy} models its actions "
                         "its own way (use --action-modes 1)")
    mode_actions = action_indices(options.mode_actions, store_features["action"], options.action_modes)
    augmentation = {"image_shift": options.image_shift, "colour_jitter": options.colour_jitter} if takes_cameras else {}
    return PolicySpec(kind=options.policy, n_obs_steps=options.observation_steps, horizon=options.horizon,
                      n_action_steps=options.n_action_steps, hidden=tuple(options.hidden), features=features,
                      action_dim=store_features["action"]["shape"][0], inputs=inputs,
                      action_modes=options.action_modes, mode_actions=mode_actions, task_count=task_count,
                      **augmentation, **cls.options(options))


def _model_shape(name: str, shape: list[int]) -> list[int]:
    """A feature's shape as the model sees it: cameras go from H x W x C to C x H x W."""
    return [shape[2], *shape[:2]] if is_image(name) else list(shape)


def action_indices(names: tuple[str, ...], action_feature: dict, action_modes: int) -> tuple[int, ...]:
    """The indices of the action dimensions ``names`` (``--mode-actions``) in the store's action."""
    if not names:
        return ()
    if action_modes == 1:
        raise ValueError("--mode-actions picks the dimensions of a mixture's modes: add --action-modes 2 or more")
    known = list(action_feature.get("names") or [])
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"--mode-actions: the action has no dimension {unknown[0]!r}; it has "
                         f"{', '.join(known) if known else 'no names'}")
    return tuple(sorted(known.index(name) for name in names))


def make_policy(spec: PolicySpec, stats: dict[str, dict[str, np.ndarray]]) -> Policy:
    """A policy of ``spec.kind`` with normalisation from ``stats``."""
    return policy_class(spec.kind)(spec, stats)
