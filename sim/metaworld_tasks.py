"""Meta-World's MT50 as a task family: its task names, groups, env ids and scripted experts.

Every MT50 task is a RoboFleet task named ``metaworld/<task>`` (``metaworld/pick-place-v3``),
which is also its gymnasium env id. The groups are ``metaworld/mt10`` and ``metaworld/mt50``
(Meta-World's benchmarks) and LeRobot's difficulty groups ``metaworld/easy`` (28 tasks),
``metaworld/medium`` (11), ``metaworld/hard`` (6) and ``metaworld/very_hard`` (5).

The task descriptions, task indices, difficulty groups and each task's scripted policy are
LeRobot's (``lerobot/envs/metaworld_config.json``, read as data: neither lerobot's env module
nor metaworld is imported here). Importing this module loads neither mujoco nor metaworld:
``import sim`` registers the envs from it, and the expert imports ``metaworld.policies`` when
first made.
"""

from __future__ import annotations

import json
import warnings
from importlib.resources import files

import gymnasium as gym
import numpy as np

FAMILY = "metaworld"
ENTRY_POINT = "sim.envs.metaworld:MetaWorldEnv"
MAX_EPISODE_STEPS = 500  # Meta-World's max_path_length, the same for every task (and LeRobot's episode length)

_CONFIG = json.loads((files("lerobot") / "envs" / "metaworld_config.json").read_text())
DESCRIPTIONS: dict[str, str] = _CONFIG["TASK_DESCRIPTIONS"]  # Meta-World task -> its instruction
TASK_INDEX: dict[str, int] = _CONFIG["TASK_NAME_TO_ID"]  # Meta-World task -> LeRobot's task index (0-49)
POLICIES: dict[str, str] = _CONFIG["TASK_POLICY_MAPPING"]  # Meta-World task -> its class in metaworld.policies
# Meta-World's MT10 benchmark (metaworld.env_dict.MT10_V3), in its order.
MT10 = ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3", "drawer-close-v3",
        "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3")
GROUPS: dict[str, tuple[str, ...]] = {  # group name -> Meta-World task names
    f"{FAMILY}/{group}": tuple(tasks)
    for group, tasks in {"mt10": MT10, "mt50": tuple(TASK_INDEX), **_CONFIG["DIFFICULTY_TO_TASKS"]}.items()
}


def task_name(metaworld_task: str) -> str:
    """The RoboFleet task name (and env id) of a Meta-World task: ``pick-place-v3`` -> ``metaworld/pick-place-v3``."""
    return f"{FAMILY}/{metaworld_task}"



def register_envs() -> None:
    """Register every MT50 task's env id with gymnasium, by reference (nothing is imported until ``gym.make``)."""
    for task in TASK_INDEX:
        if task_name(task) not in gym.registry:
            gym.register(id=task_name(task), entry_point=ENTRY_POINT, kwargs={"task": task},
                         max_episode_steps=MAX_EPISODE_STEPS)


class MetaWorldExpert:
    """The task's scripted policy from ``metaworld.policies``, as a RoboFleet expert.

    Meta-World's policies are functions of the full 39-dim observation, which the env gives as
    ``observation.environment_state``: the expert has no memory, so it takes over from any state
    (``label_state`` is the same function). It has no per-episode style either: ``reset`` keeps
    nothing, and the demonstrations vary with the object and goal positions alone.
    """

    def __init__(self, task: str, profile=None):
        import metaworld.policies

        self.policy = getattr(metaworld.policies, POLICIES[task])()

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: the policy is a function of the observation."""

    def __call__(self, observation: dict) -> np.ndarray:
        with warnings.catch_warnings():
            # The policies warn whenever a proportional gain asks for more than the env's clip at 1.
            warnings.filterwarnings("ignore", "Constant\\(s\\) may be too high")
            action = self.policy.get_action(observation["observation.environment_state"].astype(np.float64))
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    label_state = __call__
