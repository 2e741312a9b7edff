"""Tiny plug-in tasks for tests: fast, deterministic (but one), and failing when told to."""

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from sim import TaskSpec
from sim.envs.reach import ReachEnv
from sim.experts import ReachExpert

EPISODE_LENGTH = 6


class CoinEnv(gym.Env):
    """Six steps; the episode succeeds when the final action is positive."""

    metadata = {"render_fps": 10, "render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Dict({"observation.state": spaces.Box(-10, 10, shape=(2,), dtype=np.float32)})
        self.action_space = spaces.Box(-1, 1, shape=(1,), dtype=np.float32)

    def _observation(self):
        return {"observation.state": np.array([self.t, self.value], dtype=np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.value = 0, float(self.np_random.uniform(-1, 1))
        return self._observation(), {"is_success": False}

    def step(self, action):
        self.t += 1
        done = self.t >= EPISODE_LENGTH
        success = bool(done and action[0] > 0)
        return self._observation(), float(success), done, False, {"is_success": success}


class OddSeedsFail:
    """Succeeds on even seeds, fails on odd ones."""

    def reset(self, seed=None):
        self.sign = 1.0 if seed % 2 == 0 else -1.0

    def __call__(self, observation):
        return np.array([self.sign], dtype=np.float32)


if "toy/Coin-v0" not in gym.registry:
    gym.register("toy/Coin-v0", entry_point=CoinEnv)

COIN = TaskSpec("coin", "toy/Coin-v0", lambda profile: OddSeedsFail(), env_kwargs=lambda profile: {},
                supports_cameras=False)


class WithoutPrivilegedState(gym.ObservationWrapper):
    """A RoboFleet env whose observations leave out ``observation.environment_state``, as a real robot's would."""

    PRIVILEGED = "observation.environment_state"

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = spaces.Dict({name: space for name, space in env.observation_space.spaces.items()
                                              if name != self.PRIVILEGED})

    def observation(self, observation):
        return {name: value for name, value in observation.items() if name != self.PRIVILEGED}


if "toy/ReachWithoutPrivilegedState-v0" not in gym.registry:
    gym.register("toy/ReachWithoutPrivilegedState-v0",
                 entry_point=lambda **kwargs: WithoutPrivilegedState(gym.make("robofleet/Reach-v0", **kwargs)))

# reach as a real robot sees it (no expert can act on it: the expert needs the goal's position)
REACH_WITHOUT_PRIVILEGED_STATE = TaskSpec("reach", "toy/ReachWithoutPrivilegedState-v0", lambda profile: None)


class NoisyGoalReach(ReachEnv):
    """reach whose goal moves by unseeded noise at every reset: ``reset(seed)`` does not fix its episode."""

    def _reset_task(self) -> None:
        super()._reset_task()
        self.model.site_pos[self.goal_site] += np.random.uniform(-0.02, 0.02, size=3)


if "toy/NoisyGoalReach-v0" not in gym.registry:
    gym.register("toy/NoisyGoalReach-v0", entry_point=NoisyGoalReach, max_episode_steps=60)

NOISY_REACH = TaskSpec("noisy_reach", "toy/NoisyGoalReach-v0", ReachExpert)
