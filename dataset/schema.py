"""The features dict: one LeRobot-style description of everything a shard stores."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

# Per-step signals recorded beside the observations and the action (shape (1,), as in LeRobot).
STEP_FEATURES = {
    "next.reward": {"dtype": "float32", "shape": [1], "names": None},
    "next.success": {"dtype": "bool", "shape": [1], "names": None},
}

# Recorded in a multi-task collection only: the frame's task, an index into the manifest's task list ("tasks").
TASK_FEATURES = {"task_index": {"dtype": "int64", "shape": [1], "names": None}}


def _vector_feature(space: spaces.Box, names) -> dict:
    names = list(names) if names is not None else [f"{i}" for i in range(int(np.prod(space.shape)))]
    return {"dtype": "float32", "shape": list(space.shape), "names": names}


def features_of(env: gym.Env) -> dict[str, dict]:
    """``{feature: {dtype, shape, names}}`` for an env's observations, action and step signals.

    Vector features take their dimension names from ``env.unwrapped.feature_names``
    when the env provides them; uint8 H x W x 3 observations become image features.
    """
    names = getattr(env.unwrapped, "feature_names", {})
    if not isinstance(env.observation_space, spaces.Dict):
        raise ValueError("a RoboFleet task's observations must be a gymnasium Dict space")
    features = {}
    for key, space in env.observation_space.spaces.items():
        if space.dtype == np.uint8 and len(space.shape) == 3:
            features[key] = {"dtype": "image", "shape": list(space.shape), "names": ["height", "width", "channels"]}
        else:
            features[key] = _vector_feature(space, names.get(key))
    features["action"] = _vector_feature(env.action_space, names.get("action"))
    return {**features, **STEP_FEATURES}
