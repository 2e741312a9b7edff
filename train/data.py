"""What a training command reads: the fleet store (``train/bc.py``, ``train/federated.py``), opened
and checked, and for train/bc.py its episodes, the policy's spec on them and their loaders, with
the labeller that says what else to learn from and which actions to learn."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch
import torch.distributed as dist

from core.errors import fail, warn
from dataset import FleetStore
from dataset.episodes import EpisodeRef, select_episodes, split_episodes
from dataset.loader import EpochLoader, make_dataloader
from dataset.manifest import MANIFEST
from dataset.shard import store_name
from dataset.stats import fleet_stats
from dataset.windows import FleetWindowDataset, WindowSpec
from train.config import DataConfig, TrainConfig
from train.fed.federated_config import FederatedConfig
from train.identity import data_identity, store_tasks
from train.policies.options import PolicyOptions
from train.policies.policy import PolicySpec, policy_spec

NAMED = 5  # missing stores named in a message; the rest are counted


def store_names(robot_ids: list[int]) -> str:
    """Robot stores as a short phrase: the first ``NAMED`` by name, the rest counted."""
    more = f" and {len(robot_ids) - NAMED} more" if len(robot_ids) > NAMED else ""
    return ", ".join(store_name(robot_id) for robot_id in robot_ids[:NAMED]) + more


def missing_stores(store: FleetStore) -> str:
    """The robot stores ``store``'s manifest lists but its directory lacks, as a short phrase."""
    missing = store.missing_robots
    return f"{len(missing)} robot store(s) listed in {store.path / MANIFEST} are missing: {store_names(missing)}"


def open_training_store(config: DataConfig | FederatedConfig, quiet: bool = False) -> FleetStore:
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
    if foreign := store.foreign_robots:
        robot = next(iter(foreign))
        fail(f"{store.shards[robot].path.name} belongs to another collection than {store.path}'s {MANIFEST}: "
             f"{foreign[robot]}; run `collect --repair {store.path}` to recollect it from the manifest's seeds")
    if short := store.short_robots:
        shard, recorded = store.shards[short[0]], store.manifest["robots"][str(short[0])]["episodes"]
        fail(f"{shard.path.name} shows {shard.num_episodes} committed episodes, {MANIFEST} records {recorded}: "
             f"its meta/episode_ends are damaged; run `collect --repair {store.path}`")
    return store


class Labeller(Protocol):
    """What a run learns from besides ``--data``, and the actions it learns: train/bc.py's labeller.

    ``stores`` are more fleet stores and ``episodes()`` the episodes of them to train on (numbered
    within ``stores``); ``window(spec)`` is the window the loader reads for a policy of ``spec``;
    ``labeller(batch)`` turns each batch, on the device, into the policy's inputs and the actions it
    is to learn; ``str(labeller)`` says so on the start line ('' says nothing). ``StoreActions`` is
    plain behaviour cloning; train/distill.py's ``TeacherLabels`` learns a teacher's actions, and
    train/fleet/labels.py's ``DeploymentLabels`` the expert's stretches of deployment.
    """

    stores: Sequence[FleetStore]

    def episodes(self) -> list[EpisodeRef]: ...

    def window(self, spec: PolicySpec) -> WindowSpec: ...

    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...


class StoreActions:
    """The labeller of behaviour cloning: no other stores, and the actions the store holds."""

    stores: tuple[FleetStore, ...] = ()

    def __str__(self) -> str:
        return ""

    def episodes(self) -> list[EpisodeRef]:
        return []

    def window(self, spec: PolicySpec) -> WindowSpec:
        return WindowSpec.of(spec.n_obs_steps, spec.horizon, [*spec.features, "action"], spec.action_start)

    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return batch


@dataclass
class TrainingData:
    """What a run of train/bc.py trains on: ``--data``'s store and statistics, the policy's spec on it,
    the loaders of the training and the held-out episodes, and what it was trained on
    (train/identity.py: the checkpoints record it, a resume checks it)."""

    store: FleetStore
    stats: dict[str, dict[str, np.ndarray]]
    spec: PolicySpec
    train_loader: EpochLoader
    val_loader: EpochLoader | None
    identity: dict
    counts: tuple[int, int]  # training and held-out episodes

    def describe(self) -> str:
        """The start line's phrase: what the policy sees, from how many episodes."""
        return (f"{self.spec.inputs} ({', '.join(self.spec.features)}) from {self.counts[0]} episodes "
                f"({self.counts[1]} held out)")


def shared_stats(store: FleetStore, master: bool) -> dict[str, dict[str, np.ndarray]]:
    """The store's statistics: rank 0 computes (and caches) them first, the other ranks then read the cache."""
    stats = fleet_stats(store) if master else None
    if dist.is_initialized():
        dist.barrier()
    return stats if master else fleet_stats(store)


def selected_episodes(store: FleetStore, options: DataConfig) -> list[EpisodeRef]:
    """The episodes of ``store`` a run trains on: those ``--robots``, ``--sites`` and ``--episodes-per-robot`` keep."""
    return select_episodes(store, robots=options.robots or None, sites=options.sites or None,
                           per_robot=options.episodes_per_robot or None)


def store_policy_spec(options: PolicyOptions, store: FleetStore) -> PolicySpec:
    """The spec of ``options.policy`` on ``store``: its features, and on a multi-task store its task list (the
    one-hot) and the features its tasks record each in their own shape (which no input may read)."""
    return policy_spec(options, store.features, len(store_tasks(store)), store.task_features)


def training_data(config: TrainConfig, labeller: Labeller, master: bool) -> TrainingData:
    """The store, episodes, policy spec and loaders of a train/bc.py run; a one-line ``ValueError`` (or
    ``DataError``) where the data cannot be trained on or the policy's options do not fit it."""
    options = config.data
    store = open_training_store(options, quiet=not master)
    stats = shared_stats(store, master)
    episodes = selected_episodes(store, options)
    # the labeller's episodes are in its stores, numbered after --data's
    episodes += [dataclasses.replace(episode, store=episode.store + 1) for episode in labeller.episodes()]
    train_episodes, val_episodes = split_episodes(episodes, options.val_fraction, seed=config.seed)
    if not train_episodes:
        raise ValueError(f"no successful episodes in {options.data} match --robots {options.robots} "
                         f"--sites {options.sites}")
    # the policy's inputs (--inputs): which features it sees, and on a multi-task store its task
    spec = store_policy_spec(config.policy, store)
    # the frames are read once, for both loaders; too few windows for the batch or the ranks is a ValueError
    windows = FleetWindowDataset([store, *labeller.stores], train_episodes + val_episodes, labeller.window(spec),
                                 mode=options.mode)
    batch_size = config.optim.batch_size
    train_loader = make_dataloader(windows.with_episodes(train_episodes), batch_size=batch_size, seed=config.seed)
    val_loader = None
    if val_episodes:
        val_loader = make_dataloader(windows.with_episodes(val_episodes), batch_size=batch_size, shuffle=False,
                                     drop_last=False)
    identity = data_identity(store, [episode for episode in episodes if episode.store == 0])  # --data's only
    return TrainingData(store, stats, spec, train_loader, val_loader, identity,
                        (len(train_episodes), len(val_episodes)))
