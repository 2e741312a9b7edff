"""Adapters that make any gymnasium env look like a RoboFleet task."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
from gymnasium import spaces

SuccessTest = Callable[[Any, dict, bool], bool]


class LeRobotObservation(gym.Wrapper):
    """Wraps an env so it speaks the RoboFleet contract.

    - The observation becomes ``{"observation.state": obs}`` (a ``Dict`` space with
      LeRobot's key name), unless it already is a ``Dict``.
    - ``info["is_success"]`` is set on every reset and step by ``success(obs, info,
      terminated)``, evaluated on the wrapped env's own observation.
    """

    def __init__(self, env: gym.Env, success: SuccessTest, key: str = "observation.state"):
        super().__init__(env)
        self._success, self._key = success, key
        self._wraps_observation = not isinstance(env.observation_space, spaces.Dict)
        if self._wraps_observation:
            self.observation_space = spaces.Dict({key: env.observation_space})

    def _as_dict(self, observation):
        return {self._key: observation} if self._wraps_observation else observation

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        info["is_success"] = bool(self._success(observation, info, False))
        return self._as_dict(observation), info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        info["is_success"] = bool(self._success(observation, info, terminated))
        return self._as_dict(observation), reward, terminated, truncated, info
