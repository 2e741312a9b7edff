"""Reading a shard's arrays chunk by chunk, so that damage is named where it is.

Stores written by ``collect`` carry a crc32c checksum on every chunk (zarr v3's ``crc32c``
codec, after the compressor): a flipped bit, a truncated or an overwritten chunk fails to
decode. zarr reads a *missing* chunk as its fill value without complaint, so presence is
checked separately, against the chunk keys the committed range needs.

Every failure becomes a ``DataError`` that names the shard, the array, the chunk, the
frames and the episodes it holds, and the command that repairs it.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterator

import numpy as np
import zarr

from dataset.shard import Shard, run_async


class DataError(ValueError):
    """The data on disk cannot be trained on (NaN or inf, a damaged or missing chunk)."""


def data_error_line(error: DataError) -> str:
    """The one line of a ``DataError``, also where a DataLoader worker raised it (torch adds its traceback)."""
    return str(error).strip().splitlines()[-1].split("DataError: ", 1)[-1]


def has_checksums(array: zarr.Array) -> bool:
    """Whether every chunk of ``array`` carries a crc32c checksum (stores written before checksums do not)."""
    return any(type(codec).__name__ == "Crc32cCodec" for codec in array.metadata.codecs)


def chunk_rows(array: zarr.Array, length: int) -> Iterator[tuple[int, int, list[str]]]:
    """``(start, stop, keys)`` for each row of chunks along axis 0 up to ``length``; keys as in ``path/c.0.0``."""
    rows = array.chunks[0]
    across = [range(math.ceil(size / chunk)) for size, chunk in zip(array.shape[1:], array.chunks[1:])]
    for row in range(math.ceil(length / rows)):
        keys = [array.metadata.encode_chunk_key((row, *rest)) for rest in itertools.product(*across)]
        yield row * rows, min(length, (row + 1) * rows), keys


def rows_label(path: str, start: int, stop: int) -> str:
    """``frames 0-1023`` for a data array, ``episodes 0-9`` for a meta array."""
    return f"{'frames' if path.startswith('data/') else 'episodes'} {start}-{stop - 1}"


def may_be_absent(path: str, episodes: range) -> bool:
    """Whether a chunk may be missing because all its values equal the fill value.

    zarr's default writer leaves such chunks out (``write_empty_chunks`` is off by default;
    collect turns it on, but a shard may be rewritten by other zarr code), so a missing
    chunk is only damage where zeros are impossible: observations and actions (continuous
    signals and images), episode ends, lengths and seeds, and the attempt indices of two or
    more episodes (they are distinct). A lone episode's index may be 0; step signals
    (``next.*``) and success flags may all be 0 or False (failed episodes kept).
    """
    kind, name = path.split("/", 1)
    if kind == "data":
        return not (name == "action" or name.startswith("observation."))
    return name == "episode_success" or (name == "episode_index" and len(episodes) == 1)


async def list_keys(store) -> list[str]:
    return [key async for key in store.list()]


def _episodes(shard: Shard, path: str, start: int, stop: int) -> range:
    """The episodes rows ``[start, stop)`` of ``path`` belong to (a meta array has a row per episode)."""
    return shard.episodes_in(start, stop) if path.startswith("data/") else range(start, stop)


def _where(shard: Shard, path: str, start: int, stop: int, keys: list[str]) -> str:
    episodes = _episodes(shard, path, start, stop)
    return (f"{shard.path.name} {path} chunk {', '.join(keys)} ({rows_label(path, start, stop)}, "
            f"episodes {episodes.start}-{episodes.stop - 1})")


def decode_failure(error: Exception) -> str:
    """Why a chunk failed to decode, in words."""
    if "checksum" in str(error):  # zarr's crc32c codec: "Stored and computed checksum do not match ..."
        return "its crc32c checksum does not match"
    return f"it cannot be decoded ({type(error).__name__}: {error})"


def _repair_hint(shard: Shard) -> str:
    return f"run `collect --repair {shard.path.parent}`"


def check_present(shard: Shard, paths: list[str]) -> None:
    """Raise ``DataError`` if a chunk that the committed range of one of ``paths`` needs is missing."""
    present = set(run_async(list_keys(shard.group.store)))
    for path in paths:
        length = shard.num_frames if path.startswith("data/") else shard.num_episodes
        for start, stop, keys in chunk_rows(shard.group[path], length):
            missing = [key for key in keys if f"{path}/{key}" not in present]
            if missing and not may_be_absent(path, _episodes(shard, path, start, stop)):
                raise DataError(f"{_where(shard, path, start, stop, missing)} is missing; {_repair_hint(shard)}")


def read_rows(shard: Shard, path: str, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of one array; a chunk that fails to decode is a ``DataError`` naming it."""
    try:
        return shard.group[path][start:stop]
    except Exception as error:  # the crc32c codec raises ValueError; zstd and blosc raise RuntimeError
        raise damage_error(shard, path, start, stop, error) from None


def damage_error(shard: Shard, path: str, start: int, stop: int, error: Exception) -> DataError:
    """The ``DataError`` for a failed read of rows ``[start, stop)``, naming the first chunk that fails on its own."""
    array = shard.group[path]
    for row_start, row_stop, keys in chunk_rows(array, stop):
        if row_stop <= start:
            continue
        try:
            array[row_start:row_stop]
        except Exception as chunk_error:
            return DataError(f"{_where(shard, path, row_start, row_stop, keys)} is damaged: "
                             f"{decode_failure(chunk_error)}; {_repair_hint(shard)}")
    return DataError(f"{shard.path.name} {path} {rows_label(path, start, stop)} cannot be read: "
                     f"{decode_failure(error)}; {_repair_hint(shard)}")
