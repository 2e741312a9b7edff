"""Where window frames come from: all in RAM, or streamed from zarr chunks through a bounded cache.

Both sources number the frames of the shards they serve in one global index (shard
after shard, in the order given) and answer ``gather(feature, global_indices)`` with
the rows of that feature, in the requested order. Both refuse NaN or inf, and chunks
that are missing or fail their checksum, with a ``DataError`` naming the shard and the
episode, so a model never trains on them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from dataset.chunks import DataError, check_present, damage_error, read_rows
from dataset.shard import Shard, run_concurrently

DEFAULT_CACHE_BYTES = 256 * 2**20


def check_finite(values: np.ndarray, shard: Shard, feature: str, first_frame: int) -> None:
    """Raise ``DataError`` naming the shard and episode if ``values`` (frames from ``first_frame``) hold NaN or inf."""
    if values.dtype.kind != "f":
        return
    bad_rows = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
    if bad_rows.any():
        frame = first_frame + int(np.argmax(bad_rows))
        raise DataError(f"{shard.path.name} episode {shard.episode_of(frame)}: {feature} has NaN or inf at frame {frame}; "
                        f"run `dataset verify {shard.path.parent}`")


class _FrameSource:
    """The global frame numbering shared by both sources."""

    def __init__(self, shards: Sequence[Shard], features: Sequence[str]):
        self.shards, self.features = list(shards), list(features)
        for shard in self.shards:
            check_present(shard, [f"data/{feature}" for feature in self.features])
        self.offsets = np.cumsum([0] + [shard.num_frames for shard in self.shards])

    def global_index(self, shard_position: int, frame: int) -> int:
        return int(self.offsets[shard_position]) + frame

    def gather(self, feature: str, indices: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``indices`` of ``feature``, written into ``out`` (rows x flattened row) when given."""
        raise NotImplementedError


class InMemoryFrames(_FrameSource):
    """Every frame of the shards, loaded once and concatenated: a gather is one numpy fancy index.

    Memory: the full size of the requested features of these shards (``nbytes``).
    """

    def __init__(self, shards: Sequence[Shard], features: Sequence[str]):
        super().__init__(shards, features)
        self.arrays = {}
        for feature in self.features:
            array = None  # filled shard by shard: the peak is the features' size, not twice it
            for shard, start in zip(self.shards, self.offsets):
                part = read_rows(shard, f"data/{feature}", 0, shard.num_frames)
                check_finite(part, shard, feature, 0)
                if array is None:
                    array = np.empty((self.offsets[-1], *part.shape[1:]), dtype=part.dtype)
                array[start: start + len(part)] = part
            self.arrays[feature] = array

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in self.arrays.values())

    def gather(self, feature: str, indices: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        array = self.arrays[feature]
        if out is None:
            return array[indices]
        # mode="clip": with out=, numpy's default mode first gathers into a temporary buffer and copies it over
        # (a second pass over image rows); the windows' indices are within range by construction.
        return np.take(array.reshape(len(array), -1), indices, axis=0, out=out, mode="clip")


class StreamingFrames(_FrameSource):
    """Frames read from zarr one chunk at a time, through a least-recently-used cache.

    Memory stays under ``cache_bytes`` of decoded chunks (or the chunks one batch
    needs, if more), however large the fleet. Each process has its own cache, so a loader with W
    workers holds at most W x ``cache_bytes``.
    """

    def __init__(self, shards: Sequence[Shard], features: Sequence[str], cache_bytes: int = DEFAULT_CACHE_BYTES):
        super().__init__(shards, features)
        self.cache_bytes = cache_bytes
        self.cached_bytes = 0
        self._cache: OrderedDict[tuple[str, int, int], np.ndarray] = OrderedDict()
        first = self.shards[0].group["data"]
        self.chunk_frames = {feature: first[feature].chunks[0] for feature in self.features}
        self.row_shape = {feature: first[feature].shape[1:] for feature in self.features}
        self.dtype = {feature: first[feature].dtype for feature in self.features}
        self.hits = self.misses = 0

    def _read_chunks(self, feature: str, wanted: list[tuple[int, int]]) -> list[np.ndarray]:
        """The chunks ``(shard_position, chunk)`` of a feature: cached ones, the rest read in one go.

        zarr's per-read overhead dwarfs decoding a chunk (docs/performance.md), so all the
        misses of a batch are read concurrently in one call.
        """
        missing = [key for key in wanted if (feature, *key) not in self._cache]
        self.hits += len(wanted) - len(missing)
        self.misses += len(missing)
        reads = []
        for shard_position, chunk in missing:
            shard, start = self.shards[shard_position], chunk * self.chunk_frames[feature]
            stop = min(start + self.chunk_frames[feature], shard.num_frames)
            reads.append(shard.group[f"data/{feature}"].async_array.getitem(slice(start, stop)))
        for (shard_position, chunk), values in zip(missing, run_concurrently(reads, return_exceptions=True)):
            if isinstance(values, Exception):
                shard, start = self.shards[shard_position], chunk * self.chunk_frames[feature]
                stop = min(start + self.chunk_frames[feature], shard.num_frames)
                raise damage_error(shard, f"data/{feature}", start, stop, values)
            check_finite(values, self.shards[shard_position], feature, chunk * self.chunk_frames[feature])
            self._cache[(feature, shard_position, chunk)] = values
            self.cached_bytes += values.nbytes
        chunks = []
        for key in wanted:
            self._cache.move_to_end((feature, *key))
            chunks.append(self._cache[(feature, *key)])
        while self.cached_bytes > self.cache_bytes and len(self._cache) > len(wanted):
            self.cached_bytes -= self._cache.popitem(last=False)[1].nbytes
        return chunks

    def gather(self, feature: str, indices: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        shard_positions = np.searchsorted(self.offsets, indices, side="right") - 1
        local = indices - self.offsets[shard_positions]
        chunks = local // self.chunk_frames[feature]
        if out is None:
            out = np.empty((len(indices), *self.row_shape[feature]), dtype=self.dtype[feature])
        # Serve the requests in runs that share a (shard, chunk), each chunk fetched once.
        keys = shard_positions * (int(chunks.max(initial=0)) + 1) + chunks
        order = np.argsort(keys, kind="stable")
        run_starts = np.flatnonzero(np.diff(keys[order], prepend=-1))
        runs = [order[start:end] for start, end in zip(run_starts, [*run_starts[1:], len(order)])]
        wanted = [(int(shard_positions[rows[0]]), int(chunks[rows[0]])) for rows in runs]
        for rows, (_, chunk), values in zip(runs, wanted, self._read_chunks(feature, wanted)):
            out[rows] = values[local[rows] - chunk * self.chunk_frames[feature]].reshape(len(rows), *out.shape[1:])
        return out
