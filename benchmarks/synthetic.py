"""Policies made at run time for the benchmarks: freshly initialised weights on a task's features,
with statistics shaped as a store's (nothing is collected, nothing downloads)."""

from __future__ import annotations

import numpy as np
import torch

from dataset.schema import features_of
from sim import make_robot, resolve_task
from train.checkpoint import Checkpoint
from train.policies.options import PolicyOptions
from train.policies.policy import make_policy, policy_spec


def task_features(task: str, cameras: tuple[str, ...], image_size: int) -> dict[str, dict]:
    """The features of ``task``'s env with ``cameras`` at ``image_size`` px (the env is only probed)."""
    env = resolve_task(task).make_env(make_robot(0), cameras=cameras, image_size=image_size)
    try:
        return features_of(env)
    finally:
        env.close()


def synthetic_stats(feature: dict) -> dict[str, np.ndarray]:
    """Statistics shaped as the store's: a vector's [D]; an image's per channel [C, 1, 1], in [0, 1]."""
    image = feature["dtype"] == "image"
    shape = (feature["shape"][2], 1, 1) if image else tuple(feature["shape"])
    low, high = (0.0, 1.0) if image else (-1.0, 1.0)
    values = {"mean": (low + high) / 2, "std": (high - low) / 4, "min": low, "max": high}
    return {name: np.full(shape, value, np.float32) for name, value in values.items()}


def synthetic_checkpoint(options: PolicyOptions, features: dict[str, dict], task: str) -> Checkpoint:
    """The policy ``options`` make on ``features``, freshly initialised (seed 0), as a checkpoint of ``task``."""
    spec = policy_spec(options, features)
    stats = {name: synthetic_stats(features[name]) for name in [*spec.features, "action"]}
    torch.manual_seed(0)
    return Checkpoint(spec=spec, weights=make_policy(spec, stats).state_dict(), stats=stats, features=features,
                      task={"name": task}, step=0)
