"""One robot's zarr store (a shard): the on-disk format and its only writer.

Layout of ``OUT/robot_0042.zarr`` (zarr v3), in the style of diffusion_policy's
ReplayBuffer:

    data/<feature>        every frame of every committed episode, concatenated in time
    meta/episode_ends     int64, cumulative frame count after each episode (fill 0)
    meta/episode_index    int64, the episode's attempt index for this robot
    meta/episode_seed     int64, the reset seed (a pure function of fleet seed, robot, index)
    meta/episode_success  bool
    meta/episode_length   int64
    attrs                 schema_version, task, env_id, fps, profile, features,
                          failed_episodes (attempts dropped as failures)

Beside it, the hidden ``OUT/.robot_0042.zarr.lock`` is the writer's lock file.

Every chunk carries a crc32c checksum (zarr's ``crc32c`` codec after the compressor), so
a reader notices a flipped bit, a truncated or an overwritten chunk (``dataset.chunks``).

Chunk keys use zarr's "." separator (``data/action/c.0.0``), so an array's chunks
sit in its own directory: with the default features a store has 13 directories, not 33.

**Commit protocol.** Episodes are committed in batches, and each one only becomes
visible when complete. A store appears with its first batch: the writer builds it
whole in memory, writes it out under a hidden name and renames it into place. Later
batches are appended in place: the data arrays and the other meta arrays are
written first. ``meta/episode_ends`` is written last, and its new entries are the
commit. Every key write of zarr's LocalStore is atomic (temp file + rename), but
resizing an array writes its metadata before its chunk. So a reader trusts only the
leading run of strictly increasing positive ``episode_ends``: a trailing 0 is an
episode mid-commit. On open the writer cuts away anything past the last commit.
"""

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
from zarr.abc.store import ByteRequest
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec
from zarr.core.array_spec import ArraySpec
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.core.sync import sync  # runs a coroutine on zarr's own IO event loop
from zarr.registry import fully_qualified_name, register_codec

SCHEMA_VERSION = 1
FRAMES_PER_CHUNK = 1024  # low-dim features: ~80 KB chunks; a training window reads one or two
IMAGE_FRAMES_PER_CHUNK = 32  # 96x96x3 images: ~0.9 MB chunks before compression
META_CHUNK = 4096
META_FIELDS = ("episode_index", "episode_seed", "episode_success", "episode_length")
CHUNK_KEYS = {"name": "default", "separator": "."}
META_CODECS = [ZstdCodec(level=0), Crc32cCodec()]  # zarr's default compressor, plus the checksum


def store_name(robot_id: int) -> str:
    return f"robot_{robot_id:04d}.zarr"


def committed_count(episode_ends: np.ndarray) -> int:
    """Number of committed episodes: the leading run of strictly increasing positive ends."""
    if len(episode_ends) == 0:
        return 0
    valid = (episode_ends > 0) & (np.diff(episode_ends, prepend=0) > 0)
    return len(episode_ends) if valid.all() else int(np.argmin(valid))


def storage_dtype(feature: dict) -> np.dtype:
    """The numpy dtype a LeRobot-style feature is stored with (images are uint8)."""
    return np.dtype("uint8" if feature["dtype"] in ("image", "video") else feature["dtype"])


def _array_layout(feature: dict) -> dict:
    """Chunks and codecs for a feature: time-chunked, images with blosc-zstd, every chunk checksummed."""
    shape = tuple(feature["shape"])
    if feature["dtype"] in ("image", "video"):
        codec = BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")
        return {"chunks": (IMAGE_FRAMES_PER_CHUNK, *shape), "compressors": [codec, Crc32cCodec()],
                "chunk_key_encoding": CHUNK_KEYS}
    return {"chunks": (FRAMES_PER_CHUNK, *shape), "compressors": [ZstdCodec(level=3), Crc32cCodec()],
            "chunk_key_encoding": CHUNK_KEYS}


class InlineLocalStore(zarr.storage.LocalStore):
    """zarr's LocalStore, doing its reads and writes inline on zarr's event loop.

    LocalStore hands every file read and write to a thread (``asyncio.to_thread``). A
    shard's files are small and local, so on the 2-core VM that hand-off costs as much
    as the file operation itself: about 60 of them a robot, 7 ms of its 30 ms of store
    work. Writes stay atomic (``set_sync`` writes a temporary file and renames it).
    """

    async def get(self, key: str, prototype: BufferPrototype | None = None,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        return self.get_sync(key, prototype=prototype, byte_range=byte_range)

    async def set(self, key: str, value: Buffer) -> None:
        self.set_sync(key, value)


class InlineZstdCodec(ZstdCodec):
    """zarr's ZstdCodec, compressing inline on zarr's event loop instead of in a thread.

    The same trade as ``InlineLocalStore``: a low-dim chunk compresses in tens of
    microseconds, less than the thread hand-off. Its metadata is plain ``zstd``, so any
    zarr reader opens what it writes.
    """

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return self._encode_sync(chunk_bytes, chunk_spec)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._decode_sync(chunk_bytes, chunk_spec)


register_codec("zstd", InlineZstdCodec)  # selectable by name; zarr's default stays its own ZstdCodec
# The zarr settings a writer opens its arrays with: zstd inline, and every chunk written even
# when all of it equals the fill value (zarr's check for that compares the whole chunk on each
# write). Together they take an append from 1.9 to 1.1 ms.
WRITER_ZARR_CONFIG = {"codecs.zstd": fully_qualified_name(InlineZstdCodec), "array.write_empty_chunks": True}


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
            self.root = sync(zarr_async.open_group(store, mode="a"))
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
        self.root = sync(self.root.update_attributes({**self.attrs, "schema_version": SCHEMA_VERSION,
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
        ends = sync(self.meta["episode_ends"].getitem(slice(None)))
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
        committed = sync(self.meta["episode_index"].getitem(slice(0, self.num_episodes))).tolist()
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
                sync(_append_each([*((self.data[n], v) for n, v in columns.items()),
                                    *((self.meta[n], v) for n, v in meta_columns.items())]))
            except (ValueError, RuntimeError) as error:  # appending decodes the last partial chunk: damaged
                raise ValueError(f"{self.path.name} cannot be appended to, a chunk in it is damaged ({error}); "
                                 f"run `dataset verify {self.path.parent} --repair` first") from None
        if failed_indices:
            self.failed = sorted({*self.failed, *failed_indices})
            self.root = sync(self.root.update_attributes({"failed_episodes": self.failed}))
        if episodes:
            sync(self.meta["episode_ends"].append(self.num_frames + np.cumsum(lengths)))  # the commit
            self.num_episodes += len(episodes)
            self.num_frames += int(lengths.sum())


def run_concurrently(awaitables, return_exceptions: bool = False) -> list:
    """Run zarr coroutines together on zarr's IO event loop; their results in order."""
    return sync(_gather(awaitables, return_exceptions))


async def _gather(awaitables, return_exceptions: bool = False):
    return await asyncio.gather(*awaitables, return_exceptions=return_exceptions)


async def _append_each(pairs) -> None:
    # One after another: zarr's per-append work is CPU-bound, and gathering them was slower.
    for array, values in pairs:
        await array.append(values)


async def _build_skeleton(store: zarr.abc.store.Store, features: dict[str, dict]) -> None:
    root = await zarr_async.open_group(store, mode="w")
    data, meta = await asyncio.gather(root.create_group("data"), root.create_group("meta"))
    await asyncio.gather(
        *(data.create_array(name, shape=(0, *feature["shape"]), dtype=storage_dtype(feature), **_array_layout(feature))
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
    for every store cost 35-60 ms on the 2-core VM.
    """
    key = json.dumps(features, sort_keys=True)
    if key not in _TEMPLATES:
        files = {}
        sync(_build_skeleton(zarr.storage.MemoryStore(files), features))
        _TEMPLATES[key] = files
    return _TEMPLATES[key]


def store_bytes(path: Path) -> int:
    """Bytes on disk under ``path``."""
    return sum(entry.stat().st_size for entry in Path(path).rglob("*") if entry.is_file())



@dataclass
class ShardProgress:
    """What a store holds right now, read without taking the writer's lock."""

    episodes: int = 0
    frames: int = 0
    site: str | None = None
    settled_indices: frozenset[int] = frozenset()
    failed_indices: frozenset[int] = frozenset()


def read_progress(path: Path) -> ShardProgress:
    """Committed episodes, frames and settled attempt indices of a store (empty if absent)."""
    if not (Path(path) / "zarr.json").exists():
        return ShardProgress()
    root = zarr.open_group(path, mode="r")
    if "schema_version" not in root.attrs:
        return ShardProgress()
    ends = root["meta/episode_ends"][:]
    count = committed_count(ends)
    committed = root["meta/episode_index"][:count].tolist()
    failed = frozenset(root.attrs.get("failed_episodes", []))
    return ShardProgress(
        episodes=count,
        frames=int(ends[count - 1]) if count else 0,
        site=root.attrs.get("profile", {}).get("site"),
        settled_indices=frozenset(committed) | failed,
        failed_indices=failed,
    )
