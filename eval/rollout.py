"""The unit of work: one robot's evaluation episodes, run as envs in lockstep.

``evaluate_robot(job)`` runs in a dask worker (or in any process). It makes ``batch``
envs for the robot and runs its episodes in waves of up to ``batch`` at a time: all
envs of a wave reset together, the policy gets their observations as one batch
(``[B, ...]``, one forward pass per step) and returns one action per env. An env whose
episode has ended stops counting; it keeps its last observation in the batch until
the wave ends, so the policy's per-env history stays aligned.

An episode that crashes is a failure with its reason, and the others go on:

- the env raises (in ``reset`` or ``step``): the exception's type and message;
- the simulator goes unstable: MuJoCo flags NaN, Inf or huge values in the state
  (it then silently resets the state, so the flag is the only trace);
- the observation or the action is not finite.

If the policy (or expert) itself raises, every episode of that wave fails with the reason.
The policy is one of our checkpoints or a LeRobot pretrained_model directory
(``eval.lerobot_policy``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np
import torch

from core.errors import one_line
from eval.lerobot_policy import LeRobotAgent, is_lerobot_pretrained
from eval.video import write_mp4
from sim.fleet import RobotProfile
from sim.tasks import TaskSpec, resolve_task
from train.checkpoint import load_policy

UNSTABLE_WARNINGS = (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL,
                     mujoco.mjtWarning.mjWARN_BADQACC)


@dataclass(frozen=True)
class RobotJob:
    """Everything a worker needs to evaluate one robot (plain, picklable data)."""

    agent: str  # "policy" or "expert"
    profile: dict
    task: str
    seeds: tuple[int, ...]  # episode i runs with seeds[i]
    checkpoint: str | None
    cameras: tuple[str, ...]
    image_size: int | tuple[int, int]
    batch: int
    device: str  # auto, cpu or cuda
    n_action_steps: int | None = None  # None: the checkpoint's
    videos: tuple[int, ...] = ()  # episode indices recorded as MP4
    video_dir: str | None = None
    fps: int = 20
    max_parameters: int | None = None  # None: train.policies.budget's default
    positions: str | None = None  # a Meta-World env's positions (None: the env's default)
    task_index: int | None = None  # many tasks: the robot's task's index in the policy's list, in every observation


def _device(job: RobotJob) -> str:
    return job.device if job.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")


def policy_agent(job: RobotJob, profile: RobotProfile):
    """The job's policy: a LeRobot pretrained_model directory, or one of our checkpoints."""
    if is_lerobot_pretrained(job.checkpoint):
        return LeRobotAgent(job.checkpoint, _device(job), job.n_action_steps)
    return PolicyAgent(job, profile)


class PolicyAgent:
    """The trained policy, with the robot's personal weights when the checkpoint has them."""

    name = "policy"

    def __init__(self, job: RobotJob, profile: RobotProfile):
        device = _device(job)
        policy, _ = load_policy(job.checkpoint, robot_id=profile.robot_id, n_action_steps=job.n_action_steps,
                                max_parameters=job.max_parameters)
        self.policy = policy.to(device)
        self.inputs = list(policy.spec.features)

    def start(self, seeds: list[int]) -> None:
        self.policy.reset()

    def act(self, observations: list[dict], active: list[bool]) -> list[np.ndarray]:
        batch = {name: np.stack([observation[name] for observation in observations]) for name in self.inputs}
        return list(self.policy.select_action(batch))


class ExpertAgent:
    """The task's scripted expert: one instance per env, reset with the episode's seed."""

    name = "expert"

    def __init__(self, spec: TaskSpec, profile: RobotProfile, batch: int):
        self.experts = [spec.make_expert(profile) for _ in range(batch)]

    def start(self, seeds: list[int]) -> None:
        for expert, seed in zip(self.experts, seeds):
            expert.reset(seed)

    def act(self, observations: list[dict], active: list[bool]) -> list[np.ndarray | None]:
        return [expert(observation) if on else None
                for expert, observation, on in zip(self.experts, observations, active)]


def simulator_instability(env) -> str | None:
    """Why a MuJoCo env's state went bad during the last step, if it did (None for other envs)."""
    data = getattr(env.unwrapped, "data", None)
    if not isinstance(data, mujoco.MjData):
        return None
    for warning in UNSTABLE_WARNINGS:
        if data.warning[warning].number:
            return f"simulator unstable: MuJoCo {warning.name} (NaN, Inf or huge value; MuJoCo reset the state)"
    return None


def _finite(observation: dict) -> bool:
    return all(np.isfinite(value).all() for value in observation.values() if np.issubdtype(value.dtype, np.floating))


class _Episode:
    """One episode's running record."""

    def __init__(self, index: int, seed: int, record_video: bool):
        self.index, self.seed = index, seed
        self.success, self.steps, self.sum_reward, self.max_reward = False, 0, 0.0, -np.inf
        self.error: str | None = None
        self.done = False
        self.frames: list[np.ndarray] | None = [] if record_video else None

    def fail(self, reason: str) -> None:
        self.error, self.success, self.done = reason, False, True


def _run_wave(envs: list, agent, episodes: list[_Episode], extra: dict | None = None) -> None:
    """Run a wave of episodes (one per env) to their ends, in lockstep; ``extra`` joins every observation."""
    extra = extra or {}
    observations: list[dict | None] = [None] * len(episodes)
    for i, episode in enumerate(episodes):
        try:
            observation, info = envs[i].reset(seed=episode.seed)
            observations[i] = {**observation, **extra}
            episode.success = bool(info.get("is_success", False))
        except Exception as error:
            episode.fail(f"env reset raised {one_line(error)}")
        if episode.frames is not None and not episode.done:
            episode.frames.append(envs[i].render())
    agent.start([episode.seed for episode in episodes])
    while not all(episode.done for episode in episodes):
        filler = next(o for o, e in zip(observations, episodes) if o is not None and not e.done)
        batch = [o if o is not None else filler for o in observations]  # an env that failed to reset
        active = [not episode.done for episode in episodes]
        try:
            actions = agent.act(batch, active)
        except Exception as error:
            for episode in episodes:
                if not episode.done:
                    episode.fail(f"{agent.name} raised {one_line(error)}")
            return
        for i, episode in enumerate(episodes):
            if not episode.done:
                observation = _step(envs[i], episode, np.asarray(actions[i], dtype=np.float32))
                observations[i] = None if observation is None else {**observation, **extra}


def _step(env, episode: _Episode, action: np.ndarray) -> dict | None:
    """One env step of one episode, recorded; returns the new observation (None when it crashed)."""
    if not np.isfinite(action).all():
        episode.fail("the agent's action is not finite")
        return None
    try:
        observation, reward, terminated, truncated, info = env.step(action)
    except Exception as error:
        episode.fail(f"env step raised {one_line(error)}")
        return None
    unstable = simulator_instability(env)
    if unstable or not _finite(observation):
        episode.fail(unstable or "the observation is not finite")
        return None
    episode.steps += 1
    episode.sum_reward += float(reward)
    episode.max_reward = max(episode.max_reward, float(reward))
    episode.success = bool(info.get("is_success", False))
    if episode.frames is not None:
        episode.frames.append(env.render())
    episode.done = bool(terminated or truncated)
    return observation


def video_name(robot_id: int, site: str, agent: str, index: int) -> str:
    return f"robot_{robot_id:04d}_{site}_{agent}_episode_{index:03d}.mp4"


def robot_env(job: RobotJob, spec: TaskSpec, profile: RobotProfile):
    """One env of the job's robot, made as its episodes' envs are (cameras, positions, rendering for videos)."""
    return spec.make_env(profile, cameras=job.cameras, image_size=job.image_size,
                         **({"render_mode": "rgb_array"} if job.videos else {}),
                         **({"positions": job.positions} if job.positions else {}))


def evaluate_robot(job: RobotJob) -> list[dict]:
    """Run one robot's episodes; returns one record per episode (see the module docstring)."""
    profile = RobotProfile.from_dict(job.profile)
    spec = resolve_task(job.task)
    batch = min(job.batch, len(job.seeds))
    # A multi-task policy reads its task's index (task_index) in every observation, as its training frames had it
    extra = {} if job.task_index is None else {"task_index": np.array([job.task_index], dtype=np.int64)}

    def make_env():
        return robot_env(job, spec, profile)

    envs = []
    records = []
    try:  # the envs hold MuJoCo (and GL) contexts: closed however the task ends, as workers live on
        envs.extend(make_env() for _ in range(batch))
        agent = policy_agent(job, profile) if job.agent == "policy" else ExpertAgent(spec, profile, batch)
        for start in range(0, len(job.seeds), batch):
            wave = [_Episode(index, job.seeds[index], index in job.videos)
                    for index in range(start, min(start + batch, len(job.seeds)))]
            _run_wave(envs, agent, wave, extra)
            for i, episode in enumerate(wave):
                if episode.error is not None:  # a crashed env may be in any state: replace it
                    envs[i].close()
                    envs[i] = make_env()
                records.append(_record(job, profile, spec, episode))
    finally:
        for env in envs:
            env.close()
    return records


def _record(job: RobotJob, profile: RobotProfile, spec: TaskSpec, episode: _Episode) -> dict:
    video = None
    if episode.frames:
        video = video_name(profile.robot_id, profile.site, job.agent, episode.index)
        write_mp4(Path(job.video_dir) / video, episode.frames, job.fps)
        video = f"videos/{video}"
    return {"robot_id": profile.robot_id, "site": profile.site, "task": spec.name, "agent": job.agent,
            "episode": episode.index, "seed": episode.seed, "success": episode.success, "steps": episode.steps,
            "sum_reward": episode.sum_reward, "max_reward": episode.max_reward if episode.steps else None,
            "error": episode.error, "video": video}
