"""Training windows over a fleet, in LeRobot's batch layout.

Sample ``i`` is one frame ``t`` of one selected episode. Around it the dataset cuts,
for every feature with delta indices, the frames ``t + delta``:

| key                               | shape                 | default deltas            |
|-----------------------------------|-----------------------|---------------------------|
| ``observation.state``             | [n_obs_steps, D]      | ``1 - n_obs_steps .. 0``  |
| ``observation.environment_state`` | [n_obs_steps, E]      | ``1 - n_obs_steps .. 0``  |
| ``observation.images.<cam>``      | [n_obs_steps, H, W, C] uint8, as stored | same     |
| ``task_index`` (many tasks)       | [n_obs_steps, 1] int64, as stored | same         |
| ``action``                        | [horizon, A]          | ``0 .. horizon - 1``      |
| ``<key>_is_pad``                  | [steps] bool          | True where padded         |

plus ``robot_id``, ``episode_index`` and ``frame_index`` (of ``t``). A window never
crosses an episode boundary: indices before the episode's first frame or after its
last repeat that edge frame, and the ``_is_pad`` mask flags them, as LeRobotDataset
does with ``delta_timestamps``.

Images stay uint8 in the store's layout: a quarter of the bytes of float, and the
policy converts them on its device (``train/augment.py``).

``dataset[i]`` gives one sample; ``dataset[[i, j, ...]]`` gives a whole batch in one
vectorised gather (what ``make_dataloader`` uses), with a leading batch dimension.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import get_worker_info

from dataset.episodes import EpisodeRef
from dataset.fleet_store import FleetStore
from dataset.frames import DEFAULT_CACHE_BYTES, InMemoryFrames, StreamingFrames
from dataset.inputs import TASK_FEATURE

MODES = ("memory", "streaming")
WINDOW_DTYPES = {"image": torch.uint8, "video": torch.uint8, "int64": torch.int64}  # as stored; the rest float32


@dataclass(frozen=True)
class WindowSpec:
    """Which frames around ``t`` each feature contributes: ``{feature: [delta, ...]}``.

    The same idea as a LeRobot policy's ``observation_delta_indices`` and
    ``action_delta_indices``; ``WindowSpec.of(n_obs_steps, horizon, features)`` builds
    the usual one.
    """

    delta_indices: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, n_obs_steps: int, horizon: int, features: Sequence[str], action_start: int = 0) -> WindowSpec:
        """Observations ``t - n_obs_steps + 1 .. t`` and actions ``t + action_start ..`` (``horizon`` of them)."""
        if n_obs_steps < 1 or horizon < 1:
            raise ValueError(f"n_obs_steps and horizon must be at least 1, got {n_obs_steps} and {horizon}")
        observation = tuple(range(1 - n_obs_steps, 1))
        deltas = {name: observation for name in features if name.startswith("observation.") or name == TASK_FEATURE}
        deltas["action"] = tuple(range(action_start, action_start + horizon))
        return cls(deltas)


class FleetWindowDataset(torch.utils.data.Dataset):
    """Windows over the given episodes of one or more fleet stores (see the module docstring).

    ``mode="memory"`` loads every frame of the episodes' shards into RAM once;
    ``mode="streaming"`` reads zarr chunks on demand through a cache of at most
    ``cache_bytes`` per process. Both raise ``DataError`` on NaN or inf.
    """

    def __init__(self, stores: FleetStore | Sequence[FleetStore], episodes: Sequence[EpisodeRef], spec: WindowSpec,
                 mode: str = "memory", cache_bytes: int = DEFAULT_CACHE_BYTES):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not episodes:
            raise ValueError("no episodes to make windows from (check the robot, site, task and success filters)")
        stores = [stores] if isinstance(stores, FleetStore) else list(stores)
        features = stores[0].features
        missing = [name for name in spec.delta_indices if name not in features]
        if missing:
            raise ValueError(f"the store has no feature {missing[0]!r}; it has {sorted(features)}")
        self.spec, self.mode, self.episodes = spec, mode, list(episodes)
        self.features = {name: features[name] for name in spec.delta_indices}

        shard_keys = sorted({(e.store, e.robot_id) for e in self.episodes})
        shards = [stores[store].shards[robot] for store, robot in shard_keys]
        self._position = {key: i for i, key in enumerate(shard_keys)}
        if mode == "memory":
            self.frames = InMemoryFrames(shards, list(self.features))
        else:
            self.frames = StreamingFrames(shards, list(self.features), cache_bytes)
        self._index(self.episodes)

    def with_episodes(self, episodes: Sequence[EpisodeRef]) -> FleetWindowDataset:
        """The windows of ``episodes``, a subset of this dataset's, over the same frames (no second copy
        in RAM): a training and a validation split of one dataset."""
        outside = [e for e in episodes if (e.store, e.robot_id) not in self._position]
        if outside:
            raise ValueError(f"robot {outside[0].robot_id}'s episodes are not in this dataset's shards")
        if not episodes:
            raise ValueError("no episodes to make windows from")
        subset = copy.copy(self)
        subset.episodes = list(episodes)
        subset._index(subset.episodes)
        return subset

    def _index(self, episodes: list[EpisodeRef]) -> None:
        """One sample per frame of every episode: its global frame and its episode's global range."""
        position = self._position
        starts = np.array([self.frames.global_index(position[(e.store, e.robot_id)], e.start) for e in episodes])
        lengths = np.array([e.length for e in episodes])
        episode_of_sample = np.repeat(np.arange(len(episodes)), lengths)
        self._first = starts[episode_of_sample]
        self._last = self._first + lengths[episode_of_sample] - 1
        self._frame_index = np.arange(len(episode_of_sample)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        self._robot = np.array([e.robot_id for e in episodes])[episode_of_sample]
        self._episode = np.array([e.index for e in episodes])[episode_of_sample]

    def __len__(self) -> int:
        return len(self._first)

    @property
    def window_nbytes(self) -> int:
        """Bytes of one sample as the dataset returns it."""
        return sum(math.prod(shape) * dtype.itemsize for _, shape, dtype in self._layout(1))

    def __getitem__(self, index: int | Sequence[int]) -> dict[str, torch.Tensor]:
        if np.ndim(index) == 0:
            return {key: value[0] for key, value in self._batch(np.array([index])).items()}
        return self._batch(np.asarray(index))

    def _batch(self, samples: np.ndarray) -> dict[str, torch.Tensor]:
        if len(samples) and (samples.min() < 0 or samples.max() >= len(self)):
            raise IndexError(f"sample index out of range for a dataset of {len(self)} windows")
        first, last = self._first[samples, None], self._last[samples, None]
        current = first + self._frame_index[samples, None]
        layout = self._layout(len(samples))
        # In a DataLoader worker the batch travels to the trainer: one buffer makes that one transfer.
        batch = _views_of_one_buffer(layout) if get_worker_info() else {n: torch.empty(s, dtype=d) for n, s, d in layout}
        windows = {}  # features with the same deltas (all observations) share their row indices and mask
        for name, deltas in self.spec.delta_indices.items():
            if deltas not in windows:
                wanted = current + np.asarray(deltas)
                windows[deltas] = (np.clip(wanted, first, last).ravel(), (wanted < first) | (wanted > last))
            rows, padding = windows[deltas]
            self.frames.gather(name, rows, out=batch[name].numpy().reshape(len(rows), -1))
            batch[f"{name}_is_pad"].numpy()[:] = padding
        for name, values in (("robot_id", self._robot), ("episode_index", self._episode),
                             ("frame_index", self._frame_index)):
            np.take(values, samples, out=batch[name].numpy())
        return batch

    @functools.lru_cache(maxsize=4)
    def _layout(self, batch_size: int) -> tuple[tuple[str, tuple[int, ...], torch.dtype], ...]:
        """Name, shape and dtype of every tensor in a batch of ``batch_size`` windows."""
        layout = []
        for name, deltas in self.spec.delta_indices.items():
            shape = tuple(self.features[name]["shape"])
            dtype = WINDOW_DTYPES.get(self.features[name]["dtype"], torch.float32)
            layout.append((name, (batch_size, len(deltas), *shape), dtype))
            layout.append((f"{name}_is_pad", (batch_size, len(deltas)), torch.bool))
        layout += [(name, (batch_size,), torch.int64) for name in ("robot_id", "episode_index", "frame_index")]
        return tuple(layout)


def _views_of_one_buffer(layout) -> dict[str, torch.Tensor]:
    """Empty tensors of the given ``(name, shape, dtype)``s, all views of one allocation.

    A DataLoader worker hands a batch to the training process through shared memory, one
    segment per storage, each created, mapped and closed: in one storage, a batch is one
    segment instead of a dozen (docs/performance.md).
    """
    sizes = [math.prod(shape) * dtype.itemsize for _, shape, dtype in layout]
    aligned = [-(-size // 8) * 8 for size in sizes]  # every view starts 8-byte aligned
    buffer = torch.empty(sum(aligned), dtype=torch.uint8)
    tensors, offset = {}, 0
    for (name, shape, dtype), size, step in zip(layout, sizes, aligned):
        tensors[name] = buffer[offset: offset + size].view(dtype).view(shape)
        offset += step
    return tensors
