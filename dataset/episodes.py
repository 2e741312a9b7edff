"""Choosing episodes: filter a fleet by robot, site, task and success, and split train/val.

An ``EpisodeRef`` names one committed episode and where its frames lie in its shard.
Everything downstream (windows, loaders, federated clients) works on lists of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from dataset.chunks import read_rows
from dataset.fleet_store import FleetStore


@dataclass(frozen=True)
class EpisodeRef:
    """One committed episode: which store and shard it is in, and its frame range there."""

    store: int  # position in the list of stores the episodes were drawn from
    robot_id: int
    index: int  # position in the robot's shard
    start: int  # first frame in the shard
    end: int  # one past the last frame
    seed: int
    site: str
    task: str
    success: bool

    @property
    def length(self) -> int:
        return self.end - self.start


def _as_set(values: Iterable | None) -> set | None:
    return None if values is None else set(values)


def select_episodes(
    stores: FleetStore | Sequence[FleetStore],
    robots: Iterable[int] | None = None,
    sites: Iterable[str] | None = None,
    tasks: Iterable[str] | None = None,
    success: bool | None = True,
    per_robot: int | None = None,
) -> list[EpisodeRef]:
    """Committed episodes that pass every filter (``None`` lets everything through).

    ``success=True`` (the default) keeps only successful demonstrations, which matters
    for stores collected with ``--keep-failures``. ``per_robot`` keeps each robot's first
    that many episodes (in shard order) of those that pass the other filters.
    """
    stores = [stores] if isinstance(stores, FleetStore) else list(stores)
    robots, sites, tasks = _as_set(robots), _as_set(sites), _as_set(tasks)
    selected = []
    for store_index, store in enumerate(stores):
        for robot_id in store.robots:
            shard = store.shards[robot_id]
            site, task = store.site_of(robot_id), shard.group.attrs.get("task")
            if (robots is not None and robot_id not in robots) or (sites is not None and site not in sites) \
                    or (tasks is not None and task not in tasks) or shard.num_episodes == 0:
                continue
            seeds = read_rows(shard, "meta/episode_seed", 0, shard.num_episodes)
            successes = read_rows(shard, "meta/episode_success", 0, shard.num_episodes)
            starts = np.concatenate([[0], shard.episode_ends[:-1]])
            kept = 0
            for index, (start, end) in enumerate(zip(starts, shard.episode_ends)):
                if per_robot is not None and kept == per_robot:
                    break
                if success is None or bool(successes[index]) == success:
                    kept += 1
                    selected.append(EpisodeRef(store_index, robot_id, index, int(start), int(end), int(seeds[index]),
                                               site, task, bool(successes[index])))
    return selected


def split_episodes(episodes: Sequence[EpisodeRef], val_fraction: float, seed: int = 0
                   ) -> tuple[list[EpisodeRef], list[EpisodeRef]]:
    """A deterministic episode-level (train, val) split with ``round(n * val_fraction)`` val episodes.

    Each episode gets a key drawn from (seed, store, robot, index) alone, and the lowest
    keys go to val. So the split does not depend on the order of ``episodes``, and
    when a fleet grows most episodes stay on the side they were on.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    keys = [np.random.default_rng([seed, e.store, e.robot_id, e.index]).random() for e in episodes]
    order = np.argsort(keys, kind="stable")
    n_val = round(len(episodes) * val_fraction)
    val = set(order[:n_val].tolist())
    return ([e for i, e in enumerate(episodes) if i not in val], [e for i, e in enumerate(episodes) if i in val])
