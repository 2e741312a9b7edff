"""sim: the simulated robot fleet (robots, tasks, fleet variation, scripted experts).

Importing ``sim`` registers the gymnasium envs ``robofleet/Reach-v0``,
``robofleet/Push-v0``, ``robofleet/PickPlace-v0`` and ``robofleet/Stack-v0``, and Meta-World's
MT50 tasks as ``metaworld/<task>`` (sim/metaworld_tasks.py). It registers
them by reference, so that importing it loads neither the envs nor mujoco nor metaworld: ``gym.make``
loads an env's module, and ``sim.ReachEnv`` or ``sim.resolve_task`` load theirs when first
named. Readers of fleet data (``dataset info``) import the fleet's profiles without the physics.

Importing it first also selects headless EGL rendering (``MUJOCO_GL=egl``) unless the
variable is set: MuJoCo reads it once, when ``mujoco`` is first imported.
"""

import importlib
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402

from sim import metaworld_tasks  # noqa: E402
from sim.fleet import SITES, RobotProfile, make_fleet, make_robot  # noqa: E402

# env id -> (its class as module:name, its episode length in steps)
ENVS = {
    "robofleet/Reach-v0": ("sim.envs.reach:ReachEnv", 60),
    "robofleet/Push-v0": ("sim.envs.push:PushEnv", 200),
    "robofleet/PickPlace-v0": ("sim.envs.pick_place:PickPlaceEnv", 200),
    "robofleet/Stack-v0": ("sim.envs.stack:StackEnv", 250),
}
for _env_id, (_entry_point, _max_episode_steps) in ENVS.items():
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=_entry_point, max_episode_steps=_max_episode_steps)
metaworld_tasks.register_envs()

# What ``sim.NAME`` loads on first use: the env classes and the tasks (whose experts load mujoco)
_LOADED_ON_USE = {
    **{entry_point.split(":")[1]: entry_point.split(":")[0] for entry_point, _ in ENVS.values()},
    "TaskSpec": "sim.tasks",
    "available_tasks": "sim.tasks",
    "resolve_task": "sim.tasks",
    "resolve_tasks": "sim.tasks",
}


def __getattr__(name: str):
    """``sim.ReachEnv``, ``sim.resolve_task`` and the rest of ``_LOADED_ON_USE``, imported when first named."""
    if name not in _LOADED_ON_USE:
        raise AttributeError(f"module 'sim' has no attribute {name!r}")
    return getattr(importlib.import_module(_LOADED_ON_USE[name]), name)


__all__ = [
    "SITES",
    "PickPlaceEnv",
    "PushEnv",
    "ReachEnv",
    "RobotProfile",
    "StackEnv",
    "TaskSpec",
    "available_tasks",
    "make_fleet",
    "make_robot",
    "resolve_task",
    "resolve_tasks",
]
