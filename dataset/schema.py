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


# What the tasks of one multi-task collection may record in different shapes: each task's privileged state (its
# objects' poses and goal), which a policy of those tasks then does not read (dataset.inputs.select_inputs refuses).
TASK_OWN_FEATURES = ("observation.environment_state",)


def shared_layout(layouts: dict[str, dict]) -> tuple[dict, dict[str, dict]]:
    """A multi-task collection's layout from each task's features (task name -> ``features_of`` its env).

    Returns the features every task records alike (the manifest's ``features``) and, where tasks differ in
    some of ``TASK_OWN_FEATURES``, each task's own (task -> {feature: its description}; {} where none differ).
    Each robot store holds its own task's features. Tasks that differ in any other feature are a ``ValueError``.
    """
    (first_task, first), *_ = layouts.items()
    own = [name for name in TASK_OWN_FEATURES if any(features.get(name) != first.get(name)
                                                     for features in layouts.values())]
    shared = {name: feature for name, feature in first.items() if name not in own}
    for task, features in layouts.items():
        if other := next((name for name in {*features, *shared} - {*own}
                          if features.get(name) != shared.get(name)), None):
            raise ValueError(f"the tasks {first_task} and {task} record {other} differently: one collection holds "
                             f"one layout (only {', '.join(TASK_OWN_FEATURES)} may differ between its tasks)")
    per_task = {task: {name: features[name] for name in own if name in features} for task, features in layouts.items()}
    return shared, per_task if own else {}
