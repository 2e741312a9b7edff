"""Normalisation statistics of a fleet store, computed with dask.array and cached beside the data.

For every feature but a multi-task store's ``task_index`` (categorical: a policy
one-hots it, nothing normalises it), per dimension: ``mean``, ``std``, ``min``,
``max``, ``q01`` and ``q99`` (numpy's default linear quantiles) over every committed
frame of every shard. Image features get per-channel statistics of shape (C, 1, 1) on the [0, 1]
scale, as LeRobot keeps them.

The shards are read chunk by chunk as one dask array per feature and reduced in
parallel. Quantiles are exact: vector features are regrouped into one column per
dimension, and uint8 images are reduced to per-channel 256-bin histograms, from
which every image statistic follows exactly.

A missing chunk or one that fails its checksum is a ``DataError`` naming it (``dataset.chunks``).

The result is cached in ``OUT/stats.json`` with a fingerprint of each shard's
committed data (episode and frame counts, and the time its ``episode_ends`` last
changed); a store that has changed since gets fresh statistics.
"""

from __future__ import annotations

import json
from pathlib import Path

import dask
import dask.array as da
import numpy as np

from core.files import code_version, write_json_atomic
from dataset.chunks import check_present, read_rows
from dataset.fleet_store import FleetStore
from dataset.inputs import TASK_FEATURE

STATS_FILE = "stats.json"
QUANTILES = {"q01": 0.01, "q99": 0.99}


def fingerprint(store: FleetStore) -> dict[str, list[int]]:
    """What the statistics depend on: per shard, committed episodes, frames and last commit time."""
    return {
        shard.path.name: [shard.num_episodes, shard.num_frames,
                          (shard.path / "meta" / "episode_ends" / "zarr.json").stat().st_mtime_ns]
        for shard in store.shards.values()
    }


def _feature_array(store: FleetStore, name: str) -> da.Array:
    parts = [da.from_zarr(shard.group[f"data/{name}"])[: shard.num_frames] for shard in store.shards.values()]
    return da.concatenate([part for part in parts if part.shape[0]])


def _vector_stats(x: da.Array) -> dict[str, da.Array]:
    x = x.reshape(x.shape[0], -1).astype(np.float64)
    columns = x.rechunk((-1, 1))  # one whole column per task: exact quantiles, parallel over dimensions
    quantiles = columns.map_blocks(np.quantile, list(QUANTILES.values()), axis=0, chunks=((2,), columns.chunks[1]),
                                   dtype=np.float64)
    return {"mean": x.mean(axis=0), "std": x.std(axis=0), "min": x.min(axis=0), "max": x.max(axis=0),
            "q01": quantiles[0], "q99": quantiles[1]}


def _channel_histograms(block: np.ndarray) -> np.ndarray:
    channels = block.shape[-1]
    return np.stack([np.bincount(block[..., c].ravel(), minlength=256) for c in range(channels)])


def _histogram_quantile(cumulative: np.ndarray, q: float) -> float:
    """numpy's linear quantile of the values counted by a cumulative histogram."""
    position = q * (cumulative[-1] - 1)
    low, high = np.searchsorted(cumulative, [np.floor(position), np.ceil(position)], side="right")
    return low + (position - np.floor(position)) * (high - low)


def _image_stats(histograms: np.ndarray) -> dict[str, np.ndarray]:
    values = np.arange(256) / 255.0
    stats = {name: [] for name in ("mean", "std", "min", "max", *QUANTILES)}
    for counts in histograms:
        mean = (counts * values).sum() / counts.sum()
        stats["mean"].append(mean)
        stats["std"].append(np.sqrt((counts * (values - mean) ** 2).sum() / counts.sum()))
        present = np.flatnonzero(counts)
        stats["min"].append(values[present[0]])
        stats["max"].append(values[present[-1]])
        for name, q in QUANTILES.items():
            stats[name].append(_histogram_quantile(np.cumsum(counts), q) / 255.0)
    return {name: np.array(value).reshape(-1, 1, 1) for name, value in stats.items()}


def compute_stats(store: FleetStore) -> dict[str, dict[str, np.ndarray]]:
    """Statistics of every feature but the task index over all committed frames, reduced in parallel by dask."""
    if store.num_frames == 0:
        raise ValueError(f"{store.path} has no committed frames to compute statistics from")
    paths = [f"data/{name}" for name in store.features]
    for shard in store.shards.values():
        check_present(shard, paths)
    lazy, histograms = {}, {}
    for name, feature in store.features.items():
        if name == TASK_FEATURE:
            continue
        x = _feature_array(store, name)
        if feature["dtype"] in ("image", "video"):
            blocks = [dask.delayed(_channel_histograms)(block) for block in x.to_delayed().ravel()]
            histograms[name] = dask.delayed(sum)(blocks)
        else:
            lazy[name] = _vector_stats(x)
    try:
        lazy, histograms = dask.compute(lazy, histograms)
    except Exception:  # a chunk that fails its checksum or its decoding: find it, to name it
        for shard in store.shards.values():
            for path in paths:
                read_rows(shard, path, 0, shard.num_frames)
        raise
    stats = {name: {k: np.asarray(v, dtype=np.float32) for k, v in values.items()} for name, values in lazy.items()}
    stats.update({name: {k: v.astype(np.float32) for k, v in _image_stats(h).items()} for name, h in histograms.items()})
    return stats


def fleet_stats(store: FleetStore, recompute: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """The store's statistics: from ``OUT/stats.json`` when it matches the data, else computed and cached."""
    cache_path = Path(store.path) / STATS_FILE
    current = fingerprint(store)
    if cache_path.exists() and not recompute:
        cached = json.loads(cache_path.read_text())
        if cached.get("fingerprint") == current:
            return {name: {k: np.asarray(v, dtype=np.float32) for k, v in values.items()}
                    for name, values in cached["stats"].items()}
    stats = compute_stats(store)
    try:
        write_json_atomic(cache_path, {
            "fingerprint": current,
            "code_version": code_version(),
            "stats": {name: {k: v.tolist() for k, v in values.items()} for name, values in stats.items()},
        })
    except OSError:
        pass  # a read-only store: the statistics are still right, just not cached
    return stats
