"""A RoboFleet plug-in task made from a stock gymnasium env and a scripted expert.

Use it without installing anything, by reference:

    python -m sim.demo --tasks mountain_car_task:TASK      (with this folder on PYTHONPATH)

or declare it as an entry point of your own package (pyproject.toml):

    [project.entry-points."robofleet.tasks"]
    mountain_car = "mountain_car_task:TASK"

and then name it like a built-in task: ``--tasks mountain_car``.
"""

import gymnasium as gym
import numpy as np

from sim import TaskSpec
from sim.wrappers import LeRobotObservation

ENV_ID = "example/MountainCar-v0"


def make_env(**kwargs) -> gym.Env:
    """MountainCarContinuous with LeRobot observation keys; reaching the flag is success."""
    env = gym.make("MountainCarContinuous-v0", **kwargs)
    return LeRobotObservation(env, success=lambda observation, info, terminated: terminated)


class PumpExpert:
    """Pushes in the direction the car is moving, pumping energy until it crests the hill.

    A random dead-band per episode varies how early the expert commits to a swing.
    """

    def reset(self, seed: int | None = None) -> None:
        self.dead_band = np.random.default_rng(seed).uniform(0.0, 0.002)

    def __call__(self, observation: dict) -> np.ndarray:
        position, velocity = observation["observation.state"]
        push = 1.0 if velocity >= -self.dead_band else -1.0
        return np.array([push], dtype=np.float32)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make_env, max_episode_steps=999)

TASK = TaskSpec(
    name="mountain_car",
    env_id=ENV_ID,
    expert_factory=lambda profile: PumpExpert(),
    # A robot profile could set env kwargs here (e.g. per-site physics); this env takes none.
    env_kwargs=lambda profile: {},
    supports_cameras=False,
)
