"""The fleet store a training command reads (``train/bc.py``, ``train/federated.py``), opened and checked."""

from __future__ import annotations

from core.errors import fail, warn
from dataset import FleetStore
from dataset.manifest import MANIFEST
from dataset.shard import store_name
from train.config import TrainConfig
from train.fed.federated_config import FederatedConfig

NAMED = 5  # missing stores named in a message; the rest are counted


def store_names(robot_ids: list[int]) -> str:
    """Robot stores as a short phrase: the first ``NAMED`` by name, the rest counted."""
    more = f" and {len(robot_ids) - NAMED} more" if len(robot_ids) > NAMED else ""
    return ", ".join(store_name(robot_id) for robot_id in robot_ids[:NAMED]) + more


def missing_stores(store: FleetStore) -> str:
    """The robot stores ``store``'s manifest lists but its directory lacks, as a short phrase."""
    missing = store.missing_robots
    return f"{len(missing)} robot store(s) listed in {store.path / MANIFEST} are missing: {store_names(missing)}"


def open_training_store(config: TrainConfig | FederatedConfig, quiet: bool = False) -> FleetStore:
    """The fleet store at ``config.data``, or a one-line error: it cannot be opened, an interrupted
    repair has not finished, a robot store's episode_ends are damaged, or robot stores its manifest
    lists are missing. With ``--allow-missing-robots`` the missing ones are a warning (unless ``quiet``)."""
    try:
        store = FleetStore.open(config.data)
    except (FileNotFoundError, ValueError) as error:
        fail(str(error))
    if store.repairing:
        fail(f"{len(store.repairing)} robot store(s) of {store.path} are under repair "
             f"({store_names(sorted(store.repairing))}): an interrupted `collect --repair` has not finished; "
             f"run `collect --repair {store.path}`")
    if store.missing_robots and not config.allow_missing_robots:
        fail(f"{missing_stores(store)}; rerun the collect command that made {store.path} to collect them again, "
             "or pass --allow-missing-robots to train on the rest")
    if store.missing_robots and not quiet:
        warn(f"{missing_stores(store)}; training on the other {len(store.robots)} (--allow-missing-robots)")
    if damaged := [shard for shard in store.shards.values() if shard.unreadable]:
        fail(f"{damaged[0].path.name}: {damaged[0].unreadable}; run `collect --repair {store.path}`")
    if short := store.short_robots:
        shard, recorded = store.shards[short[0]], store.manifest["robots"][str(short[0])]["episodes"]
        fail(f"{shard.path.name} shows {shard.num_episodes} committed episodes, {MANIFEST} records {recorded}: "
             f"its meta/episode_ends are damaged; run `collect --repair {store.path}`")
    return store
