"""sim: the simulated robot fleet (robots, tasks, fleet variation, scripted experts).

Importing ``sim`` registers the gymnasium envs ``robofleet/Reach-v0``,
``robofleet/Push-v0``, ``robofleet/PickPlace-v0`` and ``robofleet/Stack-v0``.

Importing it first also selects headless EGL rendering (``MUJOCO_GL=egl``) unless the
variable is set: MuJoCo reads it once, when ``mujoco`` is first imported.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402

from sim.envs.pick_place import PickPlaceEnv
from sim.envs.push import PushEnv
from sim.envs.reach import ReachEnv
from sim.envs.stack import StackEnv
from sim.fleet import SITES, RobotProfile, make_fleet, make_robot
from sim.tasks import TaskSpec, available_tasks, resolve_task

ENV_CLASSES = {
    "robofleet/Reach-v0": ReachEnv,
    "robofleet/Push-v0": PushEnv,
    "robofleet/PickPlace-v0": PickPlaceEnv,
    "robofleet/Stack-v0": StackEnv,
}
for _env_id, _env_class in ENV_CLASSES.items():
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id,
            entry_point=f"{_env_class.__module__}:{_env_class.__name__}",
            max_episode_steps=_env_class.default_max_episode_steps,
        )

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
]
