"""One robot's zarr store (a shard): the on-disk format, its codecs, and what a reader sees of it.

Its only writer is ``dataset.writer.ShardWriter``.

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
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import zarr
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec
from zarr.registry import fully_qualified_name, register_codec

if TYPE_CHECKING:  # the chunk description zarr's codec methods take; zarr.abc.codec names it from here too
    from zarr.core.array_spec import ArraySpec

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


def array_layout(feature: dict) -> dict:
    """Chunks and codecs for a feature: time-chunked, images with blosc-zstd, every chunk checksummed."""
    shape = tuple(feature["shape"])
    if feature["dtype"] in ("image", "video"):
        codec = BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")
        return {"chunks": (IMAGE_FRAMES_PER_CHUNK, *shape), "compressors": [codec, Crc32cCodec()],
                "chunk_key_encoding": CHUNK_KEYS}
    return {"chunks": (FRAMES_PER_CHUNK, *shape), "compressors": [ZstdCodec(level=3), Crc32cCodec()],
            "chunk_key_encoding": CHUNK_KEYS}


class InlineLocalStore(zarr.storage.LocalStore):
    """zarr's LocalStore, doing its reads and writes inline on the event loop.

    LocalStore hands every file read and write to a thread (``asyncio.to_thread``). A
    shard's files are small and local, so on a small machine that hand-off costs as much
    as the file operation itself, about 60 times a robot (docs/performance.md). Writes
    stay atomic (``set_sync`` writes a temporary file and renames it).
    """

    async def get(self, key: str, prototype: BufferPrototype | None = None,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        return self.get_sync(key, prototype=prototype, byte_range=byte_range)

    async def set(self, key: str, value: Buffer) -> None:
        self.set_sync(key, value)


class InlineZstdCodec(ZstdCodec):
    """zarr's ZstdCodec, compressing inline on the event loop instead of in a thread.

    The same trade as ``InlineLocalStore``: a low-dim chunk compresses in tens of
    microseconds, less than the thread hand-off. Its metadata is plain ``zstd``, so any
    zarr reader opens what it writes.

    Both methods are zarr's public contract for codecs, despite the underscores:
    ``_encode_single`` and ``_decode_single`` are what zarr's guide to custom codecs
    ("Extending Zarr") says a codec implements, and ``_encode_sync`` and ``_decode_sync``
    are the ``zarr.abc.codec.SupportsSyncCodec`` protocol, which ZstdCodec implements.
    """

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return self._encode_sync(chunk_bytes, chunk_spec)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._decode_sync(chunk_bytes, chunk_spec)


register_codec("zstd", InlineZstdCodec)  # selectable by name; zarr's default stays its own ZstdCodec
# The zarr settings a writer opens its arrays with: zstd inline, and every chunk written even
# when all of it equals the fill value (zarr's check for that compares the whole chunk on each
# write). Both take work off every append: a thread hand-off, and a pass over the whole chunk
# (docs/performance.md).
WRITER_ZARR_CONFIG = {"codecs.zstd": fully_qualified_name(InlineZstdCodec), "array.write_empty_chunks": True}


def run_async(coroutine):
    """Run a coroutine of zarr's async API (``zarr.api.asynchronous``, ``zarr.Array.async_array``) to its end;
    its result, or its exception raised here.

    It runs on one event loop that a thread of this module keeps running, as zarr's own
    synchronous API does with its loop: calls from every thread share it, and none pays for
    starting a loop.
    """
    return asyncio.run_coroutine_threadsafe(coroutine, _event_loop()).result()


_LOOP: list[asyncio.AbstractEventLoop] = []  # the running loop, once started
_LOOP_LOCK = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    with _LOOP_LOCK:
        if not _LOOP:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="robofleet-zarr-io", daemon=True).start()
            _LOOP.append(loop)
        return _LOOP[0]


def _forget_event_loop() -> None:
    # a forked child has no copy of the loop's thread: its first call starts a loop of its own
    global _LOOP_LOCK
    _LOOP.clear()
    _LOOP_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_event_loop)


def run_concurrently(awaitables, return_exceptions: bool = False) -> list:
    """Run zarr coroutines together (``run_async``); their results in order."""
    return run_async(_gather(awaitables, return_exceptions))


async def _gather(awaitables, return_exceptions: bool = False):
    return await asyncio.gather(*awaitables, return_exceptions=return_exceptions)


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


@dataclass(frozen=True)
class Shard:
    """One robot's store as seen at open time."""

    robot_id: int
    path: Path
    group: zarr.Group
    episode_ends: np.ndarray  # committed ends only
    unreadable: str | None = None  # why episode_ends could not be read (the shard then shows no episodes)

    @property
    def num_episodes(self) -> int:
        return len(self.episode_ends)

    @property
    def num_frames(self) -> int:
        return int(self.episode_ends[-1]) if len(self.episode_ends) else 0

    def episode_of(self, frame: int) -> int:
        """Position of the committed episode that holds shard frame ``frame``."""
        return int(np.searchsorted(self.episode_ends, frame, side="right"))

    def episodes_in(self, start: int, stop: int) -> range:
        """Positions of the committed episodes that have frames in ``[start, stop)``."""
        first, last = np.searchsorted(self.episode_ends, [start, stop - 1], "right")
        return range(int(first), int(last) + 1)

    def bounds(self, index: int) -> tuple[int, int]:
        if not 0 <= index < self.num_episodes:
            raise IndexError(f"robot {self.robot_id} has {self.num_episodes} episodes, not index {index}")
        start = int(self.episode_ends[index - 1]) if index else 0
        return start, int(self.episode_ends[index])
