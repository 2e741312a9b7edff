"""Runs one episode of a policy (a scripted expert or a learned one) in an env."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym
import numpy as np


@dataclass
class Episode:
    """The outcome of one episode; ``frames`` holds per-step arrays when recorded."""

    seed: int
    success: bool
    length: int
    frames: dict[str, np.ndarray] = field(default_factory=dict)


def run_episode(
    env: gym.Env,
    policy: Callable[[dict], np.ndarray],
    seed: int,
    reset_policy: Callable[[int], None] | None = None,
    record: bool = False,
    label: Callable[[dict], np.ndarray] | None = None,
) -> Episode:
    """Reset ``env`` and the policy with ``seed`` and step until termination or truncation.

    With ``record=True`` the episode's frames are returned as arrays stacked in time:
    every observation key, ``action`` (the action taken after that observation),
    ``next.reward`` and ``next.success``. With ``label``, the recorded action is
    ``label(observation)`` instead, clipped to the action space, while ``policy``'s action
    is the one executed (DAgger: a student drives, a teacher names the action it should
    have taken).
    """
    observation, info = env.reset(seed=seed)
    if reset_policy is not None:
        reset_policy(seed)
    # One append per list per step, stacked once at the end: the cheapest way to record here.
    observations, actions, rewards, successes = [], [], [], []
    success, length = bool(info.get("is_success", False)), 0
    while True:
        action = np.asarray(policy(observation), dtype=np.float32)
        next_observation, reward, terminated, truncated, info = env.step(action)
        success, length = bool(info["is_success"]), length + 1
        if record:
            observations.append(observation)
            actions.append(action if label is None else np.clip(label(observation), env.action_space.low,
                                                                 env.action_space.high).astype(np.float32))
            rewards.append(reward)
            successes.append(success)
        observation = next_observation
        if terminated or truncated:
            break
    frames = {}
    if record:
        frames = {key: np.stack([step[key] for step in observations]) for key in observations[0]}
        frames["action"] = np.stack(actions)
        frames["next.reward"] = np.array(rewards, dtype=np.float32)
        frames["next.success"] = np.array(successes, dtype=bool)
    return Episode(seed=seed, success=success, length=length, frames=frames)


REPLAY_STEPS = 5  # steps replayed by replay_difference after the reset


def replay_difference(env: gym.Env, expert, seed: int, steps: int = REPLAY_STEPS) -> str | None:
    """Reset ``env`` and ``expert`` with ``seed`` and take ``steps`` of the expert's steps, twice; what
    differs between the two (an observation key, the action, the reward or the MuJoCo state, and
    when), or None when they agree bit for bit.

    A task's episode must be a pure function of its reset seed (the plug-in contract in docs/sim.md):
    collect checks it with this before it writes anything.
    """
    first, second = (_replay(env, expert, seed, steps) for _ in range(2))
    for step, (before, after) in enumerate(zip(first, second)):
        for key in sorted(before.keys() | after.keys()):
            a, b = np.asarray(before.get(key)), np.asarray(after.get(key))
            if a.shape != b.shape or a.tobytes() != b.tobytes():
                return f"{key} {'at reset' if step == 0 else f'after step {step}'}"
    return None if len(first) == len(second) else "episode length"


def _replay(env: gym.Env, expert, seed: int, steps: int) -> list[dict]:
    """What ``replay_difference`` compares: each step's observation, action, reward and MuJoCo state."""
    observation, _ = env.reset(seed=seed)
    trace = [{**observation, "physics": _physics(env)}]
    expert.reset(seed)
    for _ in range(steps):
        action = np.asarray(expert(observation), dtype=np.float32)
        observation, reward, terminated, truncated, _ = env.step(action)
        trace.append({**observation, "action": action, "reward": reward, "physics": _physics(env)})
        if terminated or truncated:
            break
    return trace


def _physics(env: gym.Env) -> np.ndarray:
    """The MuJoCo positions and velocities of a MuJoCo env (empty for others)."""
    data = getattr(env.unwrapped, "data", None)
    if data is None or not hasattr(data, "qpos"):
        return np.zeros(0)
    return np.concatenate([data.qpos, data.qvel])
