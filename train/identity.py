"""What a training run was trained on and with, recorded in every checkpoint and checked on resume.

``data_identity`` describes the episodes a run trains on: the task (and a multi-task store's
task list, the order its ``task_index`` counts in), the fleet seed, the
features and their shapes, the episodes per robot, the sites, and a digest of the episode
seeds (an episode is a pure function of its seed, so the digest tells two collections
apart even where their counts agree). ``check_resume`` compares a checkpoint with the run
about to carry it on:

- another task or other features: refused (the policy's inputs and normalisation would not fit);
- another collection of the same task, or another selection of it (``--data``, ``--robots``,
  ``--sites``, ``--episodes-per-robot``): refused unless ``--allow-new-data``, which carries on
  with the checkpoint's normalisation and says what changed;
- an option that shapes the optimisation (``FIXED_ON_RESUME``) given another value: refused,
  since the optimiser and schedule state come from the checkpoint (``auto`` takes the checkpoint's);
- another ``--max-steps``: applied (the run is extended or ends sooner; the learning rate
  carries on from where it stood, ``train.schedule.Schedule.extend``), and train/bc.py's
  start line says so.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Sequence

from dataset import FleetStore
from dataset.episodes import EpisodeRef

FIXED_ON_RESUME = ("lr", "lr_scaling", "base_batch", "warmup_steps", "weight_decay", "batch_size", "grad_accum",
                   "seed", "val_fraction", "ema_decay", "amp")


def store_tasks(store: FleetStore) -> list[str]:
    """The tasks of a multi-task store, in the order its ``task_index`` counts them; [] for one task."""
    return ((store.manifest or {}).get("task") or {}).get("tasks") or []


def data_identity(store: FleetStore, episodes: Sequence[EpisodeRef]) -> dict:
    """The identity of the ``episodes`` of ``store`` a run trains on (see the module docstring)."""
    manifest = store.manifest or {}
    seeds = ",".join(f"{e.robot_id}:{e.seed}" for e in sorted(episodes, key=lambda e: (e.robot_id, e.index)))
    tasks = {"tasks": store_tasks(store)} if store_tasks(store) else {}  # a multi-task store's only
    return {"task": (manifest.get("task") or {}).get("name"), **tasks, "seed": manifest.get("seed"),
            "features": {name: list(feature["shape"]) for name, feature in sorted(store.features.items())},
            "episodes": {str(robot): count for robot, count in sorted(Counter(e.robot_id for e in episodes).items())},
            "sites": sorted({e.site for e in episodes}),
            "episode_seeds": hashlib.sha256(seeds.encode()).hexdigest()[:16]}


def collections_trained_on(earlier: list[dict], data: str, identity: dict) -> list[dict]:
    """Every collection a run has trained on, in order (what checkpoints record): the ``earlier`` ones (its
    resumed checkpoint's), then ``data`` with its ``identity``, unless it is the last of them already."""
    current = {"data": data, "identity": identity}
    return list(earlier) if earlier and earlier[-1] == current else [*earlier, current]


def _episodes_phrase(identity: dict) -> str:
    counts = identity.get("episodes", {})
    return f"{sum(counts.values())} episodes of {len(counts)} robots"


def data_changes(old: dict, new: dict) -> list[str]:
    """What differs between two data identities, a short phrase each."""
    changes = [f"{key} {old.get(key)} -> {new.get(key)}" for key in ("seed", "sites") if old.get(key) != new.get(key)]
    if old.get("episodes") != new.get("episodes") or old.get("episode_seeds") != new.get("episode_seeds"):
        changes.append(f"episodes: {_episodes_phrase(old)} -> {_episodes_phrase(new)}"
                       + ("" if old.get("episodes") != new.get("episodes") else " (other seeds)"))
    return changes


def check_resume(checkpoint_config: dict, identity: dict | None, config: dict, new_identity: dict,
                 allow_new_data: bool) -> list[str]:
    """Check that ``config`` on data ``new_identity`` may carry on a checkpoint of ``checkpoint_config`` on
    data ``identity`` (None: not recorded), both configs by option name (``train.config.flat_options``);
    a one-line ``ValueError`` where it may not, else a warning for each thing it carries on with
    nonetheless (see the module docstring)."""
    notes = []
    if identity is None:
        notes.append("the checkpoint does not record what it was trained on (converted from the old format): "
                     "carrying on with the data given")
    elif (identity.get("task"), identity.get("tasks")) != (new_identity["task"], new_identity.get("tasks")):
        raise ValueError(f"it was trained on task {identity.get('task')}, not {new_identity['task']} "
                         "(--data): train another task in another --out")
    elif identity.get("features") != new_identity["features"]:
        raise ValueError("it was trained on other features than --data has (another camera set or image size); "
                         "train in another --out")
    elif changes := data_changes(identity, new_identity):
        if not allow_new_data:
            raise ValueError(f"it was trained on other data ({'; '.join(changes)}); pass --allow-new-data to carry "
                             "on with the checkpoint's normalisation, or train in another --out")
        notes.append(f"carrying on with new data (--allow-new-data): {'; '.join(changes)}")
    for name in FIXED_ON_RESUME:
        if config[name] == "auto":  # the run carries on with the checkpoint's
            continue
        if name in checkpoint_config and checkpoint_config[name] != config[name]:
            option = "--" + name.replace("_", "-")
            raise ValueError(f"it was trained with {option} {checkpoint_config[name]}, not {config[name]}: "
                             f"resume with the same {option}, or --no-resume to start afresh")
    return notes
