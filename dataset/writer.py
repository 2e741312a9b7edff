"""``ShardWriter``: the only writer of a robot's store, by the commit protocol of ``dataset.shard``."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr
from zarr.api import asynchronous as zarr_async
from zarr.abc.buffer import Buffer

from dataset.shard import (CHUNK_KEYS, META_CHUNK, META_CODECS, META_FIELDS, SCHEMA_VERSION, WRITER_ZARR_CONFIG,
                           InlineLocalStore, array_layout, committed_count, run_async, run_concurrently,
                           storage_dtype)


@dataclass
class EpisodeRecord:
    """A finished episode waiting to be committed."""

    index: int
    seed: int
    success: bool
    frames: dict[str, np.ndarray]

    @property
    def length(self) -> int:
        return len(next(iter(self.frames.values())))


class ShardWriter:
    """The single writer of one robot's store. Use as a context manager.

    Opening takes an exclusive ``flock`` on ``.robot_NNNN.zarr.lock`` beside the store
    (released by the kernel if the process dies, even by ``kill -9``) and removes any
    uncommitted tail of an existing store. A new store is created by its first commit.

    Writes go through zarr's async API on an ``InlineLocalStore``, with the arrays opened
    under ``WRITER_ZARR_CONFIG``: each stage of a commit touches every array in one call
    to zarr's event loop, instead of one blocking round trip per array.
    """

    def __init__(self, path: Path, attrs: dict, features: dict[str, dict]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.path.parent / f".{self.path.name}.lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise RuntimeError(f"{self.path} is being written by another process") from None
        self.attrs, self.features = attrs, features
        self.root = None  # the open store: set when this writer first commits to it or finds it on disk
        self.num_episodes = self.num_frames = 0
        self.failed: list[int] = []  # attempt indices dropped as failures
        if self.path.exists():
            self._open(InlineLocalStore(self.path))
            self.failed = list(self.root.attrs.get("failed_episodes", []))
            self._cut_uncommitted_tail()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()

    def _open(self, store: zarr.abc.store.Store) -> None:
        # The arrays keep these settings once opened. zarr's config is process-wide: writers opening in
        # several threads at once could leave it set, which changes speed and empty chunks, never values.
        with zarr.config.set(WRITER_ZARR_CONFIG):
            self.root = run_async(zarr_async.open_group(store, mode="a"))
            meta_names = ("episode_ends", *META_FIELDS)
            paths = [f"data/{name}" for name in self.features] + [f"meta/{name}" for name in meta_names]
            arrays = dict(zip(paths, run_concurrently(self.root.getitem(path) for path in paths)))
        self.data = {name: arrays[f"data/{name}"] for name in self.features}
        self.meta = {name: arrays[f"meta/{name}"] for name in meta_names}

    def _create(self, episodes: list[EpisodeRecord], failed_indices: list[int]) -> None:
        """Build the store with its first batch in memory, write it out aside, then rename it into place.

        Readers never see half of it, and each of its files is written once: on the VM's ext4,
        creating files and directories (temporary ones included) is half of a robot's store time.
        """
        files = dict(_empty_store_files(self.features))
        self._open(zarr.storage.MemoryStore(files))
        self.root = run_async(self.root.update_attributes({**self.attrs, "schema_version": SCHEMA_VERSION,
                                                           "features": self.features, "failed_episodes": []}))
        self._append(episodes, failed_indices)
        building = self.path.parent / f".{self.path.name}.creating"
        if building.exists():
            shutil.rmtree(building)  # left by a writer that died while creating
        made = set()
        for name, buffer in files.items():
            target = building / name
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            target.write_bytes(buffer.as_buffer_like())
        os.rename(building, self.path)
        # Another batch opens the store from disk; until then self.data and self.meta stay the
        # in-memory arrays, whose contents are what was just written.
        self.root = None

    def _cut_uncommitted_tail(self) -> None:
        ends = run_async(self.meta["episode_ends"].getitem(slice(None)))
        count = committed_count(ends)
        frames = int(ends[count - 1]) if count else 0
        resizes = [array.resize((frames, *array.shape[1:])) for array in self.data.values() if array.shape[0] != frames]
        resizes += [array.resize((count,)) for array in self.meta.values() if array.shape[0] != count]
        run_concurrently(resizes)
        self.num_episodes, self.num_frames = count, frames

    def done_indices(self) -> set[int]:
        """Attempt indices already settled: committed episodes plus recorded failures."""
        if self.num_episodes == 0:
            return set(self.failed)
        committed = run_async(self.meta["episode_index"].getitem(slice(0, self.num_episodes))).tolist()
        return set(committed) | set(self.failed)

    def commit(self, episodes: list[EpisodeRecord], failed_indices: list[int]) -> None:
        """Append complete episodes, then make them visible by writing their ends last.

        The first commit creates the store, even with nothing to add.
        """
        if not self.path.exists():
            self._create(episodes, failed_indices)
            return
        if self.root is None:
            self._open(InlineLocalStore(self.path))
        self._append(episodes, failed_indices)

    def _append(self, episodes: list[EpisodeRecord], failed_indices: list[int]) -> None:
        if episodes:
            lengths = np.array([episode.length for episode in episodes], dtype=np.int64)
            columns = {name: np.concatenate([episode.frames[name] for episode in episodes]) for name in self.data}
            meta_columns = {
                "episode_index": np.array([e.index for e in episodes], dtype=np.int64),
                "episode_seed": np.array([e.seed for e in episodes], dtype=np.int64),
                "episode_success": np.array([e.success for e in episodes], dtype=bool),
                "episode_length": lengths,
            }
            try:
                run_async(_append_each([*((self.data[n], v) for n, v in columns.items()),
                                        *((self.meta[n], v) for n, v in meta_columns.items())]))
            except (ValueError, RuntimeError) as error:  # appending decodes the last partial chunk: damaged
                raise ValueError(f"{self.path.name} cannot be appended to, a chunk in it is damaged ({error}); "
                                 f"run `collect --repair {self.path.parent}` first") from None
        if failed_indices:
            self.failed = sorted({*self.failed, *failed_indices})
            self.root = run_async(self.root.update_attributes({"failed_episodes": self.failed}))
        if episodes:
            run_async(self.meta["episode_ends"].append(self.num_frames + np.cumsum(lengths)))  # the commit
            self.num_episodes += len(episodes)
            self.num_frames += int(lengths.sum())


async def _append_each(pairs) -> None:
    # One after another: zarr's per-append work is CPU-bound, and gathering them was slower.
    for array, values in pairs:
        await array.append(values)


async def _build_skeleton(store: zarr.abc.store.Store, features: dict[str, dict]) -> None:
    root = await zarr_async.open_group(store, mode="w")
    data, meta = await asyncio.gather(root.create_group("data"), root.create_group("meta"))
    await asyncio.gather(
        *(data.create_array(name, shape=(0, *feature["shape"]), dtype=storage_dtype(feature), **array_layout(feature))
          for name, feature in features.items()),
        meta.create_array("episode_ends", shape=(0,), chunks=(META_CHUNK,), dtype="int64", fill_value=0,
                          compressors=META_CODECS, chunk_key_encoding=CHUNK_KEYS),
        *(meta.create_array(name, shape=(0,), chunks=(META_CHUNK,), dtype="bool" if name == "episode_success" else "int64",
                            compressors=META_CODECS, chunk_key_encoding=CHUNK_KEYS)
          for name in META_FIELDS),
    )


_TEMPLATES: dict[str, dict[str, Buffer]] = {}


def _empty_store_files(features: dict[str, dict]) -> dict[str, Buffer]:
    """The files of an empty store for this schema (key in the store: content), made once per process.

    Copied into a ``MemoryStore``, they are a new store. Creating the arrays through zarr
    for every store cost more than writing its first batch (docs/performance.md).
    """
    key = json.dumps(features, sort_keys=True)
    if key not in _TEMPLATES:
        files = {}
        run_async(_build_skeleton(zarr.storage.MemoryStore(files), features))
        _TEMPLATES[key] = files
    return _TEMPLATES[key]
