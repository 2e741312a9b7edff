"""Checking a fleet store for damage; every problem names the shard and, where it can, the episode.

``verify_store(store)`` checks the manifest, then each shard in its own dask task:

1. **attrs**: schema version, the required attributes, the features against the data arrays
   and against ``manifest.json``;
2. **chunk presence**: every chunk key that the committed range needs exists. zarr reads a
   missing chunk as its fill value without complaint, so this is the only way to notice one;
3. **decoding**: every chunk of the meta arrays, and (with ``check_data``) of the data arrays,
   over the committed range is read; a chunk that fails its crc32c checksum or fails to
   decode is reported with the episodes whose frames it holds. Float data is checked for
   NaN and inf, and against the bounds its task's env declares (the action space, the
   observation spaces: joint limits, the world extent);
4. **structure**: ``episode_ends`` against ``episode_length``, the meta and data array
   lengths, duplicate ``episode_index`` entries, and the manifest's per-robot counts
   (committed episodes are never removed, so a shard may not hold fewer than it records).

Only the committed range is checked, so a store that ``collect`` is still writing verifies clean.
A robot under repair (an interrupted ``collect --repair``, ``collect/repair.py``) is
damage until a repair finishes it; its store in the directory is not checked.
Notes are not damage: a store written before chunks carried checksums, bounds that could not
be checked.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable, Iterator

import dask
import numpy as np
import zarr
from tqdm.dask import TqdmCallback

from core.errors import one_line
from core.progress import progress_bar
from dataset.chunks import chunk_rows, decode_failure, has_checksums, list_keys, may_be_absent, rows_label
from dataset.fleet_store import FleetStore
from dataset.manifest import MANIFEST, REPAIR_DIR, robot_features, robot_task
from dataset.shard import (META_FIELDS, SCHEMA_VERSION, Shard, committed_count, run_async, run_concurrently,
                           storage_dtype, store_name)
from sim.fleet import RobotProfile
from sim.tasks import recorded_task

REQUIRED_ATTRS = ("schema_version", "task", "fps", "profile", "features")
READ_BATCH_BYTES = 64 * 2**20  # decoded bytes read at once per array


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a store: the shard (None: the whole store), the episode position, what."""

    shard: str | None
    episode: int | None
    message: str
    note: bool = False  # something to know that is not damage (a store without checksums)

    def __str__(self) -> str:
        where = " ".join(part for part in (self.shard, None if self.episode is None else f"episode {self.episode}")
                         if part)
        text = f"{where}: {self.message}" if where else self.message
        return f"note: {text}" if self.note else text


Bounds = dict[str, tuple[np.ndarray, np.ndarray]]  # feature -> (low, high) per dimension


def declared_bounds(store: FleetStore, given_task: str | None = None) -> tuple[dict[int, Bounds], list[Problem]]:
    """The float features' bounds of each robot's store (robot id -> bounds), from the spaces of the env of the task
    it runs, and a note where there are none.

    The manifest names the task (a group's robots each run one of its tasks, ``robot_task``); a plug-in
    ``module:attr`` it names is imported only when the user gave the same reference (``given_task``,
    ``sim.tasks.recorded_task``)."""
    manifest = store.manifest or {}
    reference = manifest.get("data_config", {}).get("task") or (manifest.get("task") or {}).get("name")
    if reference is None or not store.shards:
        return {}, []
    grouped = bool((manifest.get("task") or {}).get("tasks"))
    by_task: dict[str, Bounds] = {}
    for robot_id, shard in store.shards.items():
        task = robot_task(manifest, robot_id) if grouped else reference
        if task in by_task:
            continue
        try:
            spec = recorded_task(task, given_task, f"{store.path / MANIFEST}")
        except ValueError as error:  # an unknown task, or a plug-in the user did not name
            return {}, [Problem(None, None, f"values not checked against bounds: {error}", note=True)]
        try:
            env = spec.make_env(RobotProfile.from_dict(dict(shard.group.attrs["profile"])))
        except Exception as error:  # a plug-in module that is not importable, an env that cannot be made
            return {}, [Problem(None, None, f"values not checked against bounds: cannot make task {task!r}'s env "
                                            f"({one_line(error)})", note=True)]
        spaces = {**env.observation_space.spaces, "action": env.action_space}
        env.close()
        by_task[task] = {name: (space.low.ravel(), space.high.ravel()) for name, space in spaces.items()
                         if np.issubdtype(space.dtype, np.floating)}
    return {robot_id: by_task[robot_task(manifest, robot_id) if grouped else reference]
            for robot_id in store.shards}, []


def verify_store(store: FleetStore, check_data: bool = True, progress: bool = False,
                 notes: bool = False, given_task: str | None = None) -> list[Problem]:
    """Every problem found in ``store``, store-level ones first; empty when all is well.

    ``check_data=False`` skips decoding the data arrays: attrs, structure, meta arrays and
    chunk presence only. ``notes=True`` adds what is not damage (arrays without checksums,
    bounds left unchecked). Shards are checked in parallel on dask's threaded scheduler, or
    on the one dask's config names (``dask.config.set(scheduler=...)``, a distributed
    ``Client``); ``progress=True`` shows a tqdm bar of shards. ``given_task`` is the user's
    ``--task``, which a plug-in task the manifest names needs for its bounds (``declared_bounds``).
    """
    bounds, problems = declared_bounds(store, given_task)
    if store.manifest is None:
        problems.append(Problem(None, None, f"{store.path}: no {MANIFEST}"))
    problems.extend(under_repair(store))
    for robot_id in store.missing_robots:
        if robot_id not in store.repairing:
            problems.append(Problem(store_name(robot_id), None, f"listed in {MANIFEST} but missing"))
    for robot_id, difference in store.foreign_robots.items():
        problems.append(Problem(store_name(robot_id), None, f"belongs to another collection: {difference}"))
    tasks = [dask.delayed(verify_shard, pure=False)(shard, store.manifest, check_data, bounds.get(shard.robot_id))
             for shard in store.shards.values() if shard.robot_id not in store.repairing]
    with TqdmCallback(desc="verify", unit="shard", tqdm_class=progress_bar) if progress else contextlib.nullcontext():
        per_shard = dask.compute(*tasks, scheduler=dask.config.get("scheduler", "threads"))
    found = problems + [problem for shard_problems in per_shard for problem in shard_problems]
    return [problem for problem in found if notes or not problem.note]


def under_repair(store: FleetStore) -> list[Problem]:
    """One problem for each robot that an interrupted ``collect --repair`` has not finished."""
    return [Problem(store_name(robot_id), None, f"under repair: an interrupted repair set its damaged store aside "
                                                f"in {REPAIR_DIR}/; run `collect --repair {store.path}` to finish")
            for robot_id in sorted(store.repairing)]


def verify_shard(shard: Shard, manifest: dict | None = None, check_data: bool = True,
                 bounds: Bounds | None = None) -> list[Problem]:
    """The problems of one shard (its committed episodes as seen when the store was opened)."""
    if shard.unreadable:
        return [Problem(shard.path.name, None, shard.unreadable)]
    check = _ShardCheck(shard, bounds or {})
    check.attributes(manifest)
    check.chunks(check_data)
    check.structure(manifest)
    return check.problems


class _ShardCheck:
    """The checks of one shard, collecting their problems in ``self.problems``."""

    def __init__(self, shard: Shard, bounds: Bounds):
        self.shard, self.group, self.ends, self.bounds = shard, shard.group, shard.episode_ends, bounds
        self.data = dict(self.group["data"].arrays())
        self.meta = dict(self.group["meta"].arrays())
        self.meta_values: dict[str, np.ndarray] = {}  # committed entries of the meta arrays that decoded
        self.problems: list[Problem] = []

    def report(self, message: str, episodes=(None,), note: bool = False) -> None:
        name = self.shard.path.name
        self.problems.extend(Problem(name, None if e is None else int(e), message, note) for e in episodes)

    def attributes(self, manifest: dict | None) -> None:
        """Schema version, required attrs, and the declared features against the arrays and the manifest."""
        attrs = self.group.attrs
        if missing := [key for key in REQUIRED_ATTRS if key not in attrs]:
            self.report(f"attrs lack {', '.join(missing)}")
        if "schema_version" in attrs and attrs["schema_version"] != SCHEMA_VERSION:
            self.report(f"schema version {attrs['schema_version']!r}, expected {SCHEMA_VERSION}")
        features = dict(attrs.get("features", {}))
        if manifest and features and features != robot_features(manifest, self.shard.robot_id):
            self.report(f"attrs features differ from {MANIFEST}'s")
        for name in ("episode_ends", *META_FIELDS):
            if name not in self.meta:
                self.report(f"meta/{name} is missing")
        for name, feature in features.items():
            array = self.data.get(name)
            if array is None:
                self.report(f"data/{name} is missing (a declared feature)")
            elif array.dtype != storage_dtype(feature) or list(array.shape[1:]) != list(feature["shape"]):
                self.report(f"data/{name} holds {array.dtype} frames of shape {array.shape[1:]}, "
                            f"its feature says {feature['dtype']} {tuple(feature['shape'])}")
        for name in sorted(self.data.keys() - features.keys()):
            self.report(f"data/{name} is not a declared feature")

    def chunks(self, check_data: bool) -> None:
        """Chunk presence everywhere; decoding of the meta arrays, and of the data arrays if asked."""
        keys = set(run_async(list_keys(self.group.store)))
        unchecked = [path for path, array, _, _ in self.arrays() if not has_checksums(array)]
        if unchecked:
            self.report(f"{len(unchecked)} arrays ({', '.join(unchecked[:3])}{', ...' if len(unchecked) > 3 else ''}) "
                        "have no checksums (written before chunks carried crc32c): damage that still decodes "
                        "goes unnoticed", note=True)
        for path, array, length, episodes_of in self.arrays():
            present = []
            for start, stop, chunk_keys in chunk_rows(array, length):
                missing = [key for key in chunk_keys if f"{path}/{key}" not in keys]
                if missing and not may_be_absent(path, episodes_of(start, stop)):
                    self.report(f"{path} chunk {', '.join(missing)} ({rows_label(path, start, stop)}) is missing",
                                episodes_of(start, stop))
                else:
                    present.append((start, stop, chunk_keys))
            if path.startswith("data/") and not check_data:
                continue
            decoded, reported = [], set()
            for (start, stop, chunk_keys), values in zip(present, _read_rows(array, present)):
                if isinstance(values, Exception):  # a codec's error for a truncated or garbled chunk
                    self.report(f"{path} chunk {', '.join(chunk_keys)} ({rows_label(path, start, stop)}) is damaged: "
                                f"{decode_failure(values)}", episodes_of(start, stop))
                elif path.startswith("meta/"):
                    decoded.append(values)
                elif values.dtype.kind == "f":
                    self.nonfinite(path, start, values, reported)
                    if path[len("data/"):] in self.bounds:
                        self.out_of_bounds(path, start, values, reported)
            if sum(map(len, decoded)) == length > 0:  # a meta array read whole: structure() may use it
                self.meta_values[path] = np.concatenate(decoded)

    def nonfinite(self, path: str, start: int, values: np.ndarray, reported: set[int]) -> None:
        """Report the first NaN or inf frame of each episode in ``values`` (frames from ``start``) once."""
        for frame in start + np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1)):
            episode = self.shard.episode_of(frame)
            if episode not in reported:
                reported.add(episode)
                first = int(self.ends[episode - 1]) if episode else 0
                self.report(f"{path} has NaN or inf at frame {frame - first} (shard frame {frame})", [episode])

    def out_of_bounds(self, path: str, start: int, values: np.ndarray, reported: set[int]) -> None:
        """Report the first value outside its declared bounds in each episode in ``values`` once."""
        name = path[len("data/"):]
        low, high = self.bounds[name]
        flat = values.reshape(len(values), -1)
        with np.errstate(invalid="ignore"):  # NaN compares False: nonfinite() reports it
            outside = (flat < low) | (flat > high)
        for frame, dim in zip(*np.nonzero(outside)):
            episode = self.shard.episode_of(start + frame)
            if episode not in reported:
                reported.add(episode)
                names = (self.group.attrs["features"].get(name) or {}).get("names") or []
                label = names[dim] if dim < len(names) else str(dim)
                self.report(f"{path} {label} = {flat[frame, dim]:.4g} at shard frame {start + frame} is outside its "
                            f"declared bounds [{low[dim]:.4g}, {high[dim]:.4g}]", [episode])

    def arrays(self) -> Iterator[tuple[str, zarr.Array, int, Callable[[int, int], range]]]:
        """``(path, array, committed rows, episodes of rows [start, stop))`` for every meta and data array."""
        count, frames = self.shard.num_episodes, self.shard.num_frames
        for name, array in self.meta.items():
            yield f"meta/{name}", array, min(count, array.shape[0]), range
        for name, array in self.data.items():
            yield f"data/{name}", array, min(frames, array.shape[0]), self.shard.episodes_in

    def structure(self, manifest: dict | None) -> None:
        """Counts and lengths against episode_ends and the manifest; lengths and indices against each other."""
        count, frames = self.shard.num_episodes, self.shard.num_frames
        recorded = (manifest or {}).get("robots", {}).get(str(self.shard.robot_id), {}).get("episodes", 0)
        if recorded > count:
            self.report(f"{MANIFEST} records {recorded} committed episodes, the shard has {count}: "
                        "its meta/episode_ends are damaged")
        with contextlib.suppress(Exception):  # chunks() reported a committed chunk that fails to decode
            stored = self.meta["episode_ends"][:]  # a fresh read: the writer may have committed more
            valid = committed_count(stored)
            if stored[valid:].any():  # after the committed run only in-flight zeros may follow
                self.report(f"episode_ends are not increasing after episode {valid - 1}", [valid])
        for name, array in self.meta.items():
            if array.shape[0] < count:
                self.report(f"meta/{name} has {array.shape[0]} entries for {count} episodes", [array.shape[0]])
        for name, array in self.data.items():
            if array.shape[0] < frames:
                self.report(f"data/{name} has {array.shape[0]} frames, episode_ends need {frames}",
                            [self.shard.episode_of(array.shape[0])])
        lengths, indices = (self.meta_values.get(f"meta/{name}") for name in ("episode_length", "episode_index"))
        if lengths is not None and len(lengths) == count:
            actual = np.diff(self.ends, prepend=0)
            for episode in np.flatnonzero(lengths != actual):
                self.report(f"episode_length {lengths[episode]} disagrees with episode_ends ({actual[episode]} frames)",
                            [episode])
        if indices is not None:
            first = dict(zip(*np.unique(indices, return_index=True)))
            for episode, index in enumerate(indices):
                if first[index] != episode:
                    self.report(f"episode_index {index} is committed twice (also episode {first[index]})", [episode])


def _read_rows(array: zarr.Array, rows: list[tuple[int, int, list[str]]]) -> Iterator[np.ndarray | Exception]:
    """Each row of chunks decoded, or the exception decoding it raised.

    A batch of rows (up to ``READ_BATCH_BYTES`` decoded) is read concurrently in one call
    into zarr's event loop, whose codecs decode in threads: one call per chunk costs twice as much.
    """
    row_bytes = array.dtype.itemsize * array.chunks[0] * math.prod(array.shape[1:])
    per_batch = max(1, READ_BATCH_BYTES // max(1, row_bytes))
    for first in range(0, len(rows), per_batch):
        batch = rows[first:first + per_batch]
        yield from run_concurrently((array.async_array.getitem(slice(start, stop)) for start, stop, _ in batch),
                                    return_exceptions=True)

