"""The unit of work: collect one robot's episodes into its own store.

``collect_robot`` runs in a dask worker process. It is the only writer of its
robot's store, skips episodes that are already settled (so a retry after a crash or
a killed worker carries on), and reports progress as dask events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from core.errors import crash_point
from dataset.schema import TASK_FEATURES, features_of
from dataset.shard import storage_dtype
from dataset.writer import EpisodeRecord, ShardWriter
from sim.fleet import RobotProfile, episode_seed
from sim.rollout import run_episode
from sim.tasks import resolve_task

PROGRESS_TOPIC = "robofleet.collect.progress"
# Seconds between a robot's progress events. Each event costs the worker's event loop a
# round trip to the scheduler, too much for one per episode (docs/performance.md).
PROGRESS_INTERVAL = 0.5


@dataclass(frozen=True)
class Actor:
    """Who acts in place of the task's scripted expert, and how its episodes are seeded.

    ``make(profile)`` runs in the worker (so it must pickle) and returns an agent with
    ``reset(seed)``, ``__call__(observation)``, the action executed, and optionally
    ``label(observation)``, the action recorded (DAgger in train/distill.py: the student
    drives, the teacher labels). Episodes draw their seeds from ``seed_stream`` and
    ``seed_round`` (``sim.fleet.episode_seed``); ``lineage`` says where the data came from
    and is kept in the manifest and on every shard.
    """

    make: Callable
    seed_stream: str = "collect"
    seed_round: int = 0
    lineage: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RobotJob:
    """Everything a worker needs to collect one robot's episodes (plain, picklable data)."""

    store_path: str
    profile: dict
    task: str
    fleet_seed: int
    episodes: int
    cameras: tuple[str, ...]
    image_size: int
    keep_failures: bool
    flush_frames: int
    attrs: dict  # stored on the shard: task, env id, fps, code version, data config
    actor: Actor | None = None  # None: the task's scripted expert
    task_index: int | None = None  # in a multi-task collection: the task's index in the manifest's list


@dataclass
class RobotReport:
    robot_id: int
    site: str
    kept: int  # committed episodes in the store, from this run and earlier ones
    failed: int  # attempts dropped as failures, from this run and earlier ones
    frames: int
    steps: int  # env steps simulated by this run (failures included)
    seconds: float


def to_features(frames: dict[str, np.ndarray], features: dict[str, dict]) -> dict[str, np.ndarray]:
    """Cast and shape an episode's recorded columns to the stored features."""
    length = len(frames["action"])
    return {
        name: frames[name].astype(storage_dtype(feature), copy=False).reshape(length, *feature["shape"])
        for name, feature in features.items()
    }


def collect_robot(job: RobotJob, report_progress: Callable[[int, int], None] | None = None) -> RobotReport:
    """Collect the missing episodes of one robot; ``report_progress(robot_id, settled)``."""
    started = time.perf_counter()
    profile = RobotProfile.from_dict(job.profile)
    spec = resolve_task(job.task)
    env = spec.make_env(profile, cameras=job.cameras, image_size=job.image_size)
    actor = job.actor or Actor(spec.make_expert)
    agent = actor.make(profile)
    features = {**features_of(env), **(TASK_FEATURES if job.task_index is not None else {})}
    steps = 0
    with ShardWriter(job.store_path, {**job.attrs, "profile": job.profile}, features) as shard:
        settled = shard.done_indices()
        settled_count = sum(index < job.episodes for index in settled)
        pending, dropped_failures, buffered_frames = [], [], 0
        for index in range(job.episodes):
            if index in settled:
                continue
            seed = episode_seed(job.fleet_seed, profile.robot_id, index, actor.seed_stream, actor.seed_round)
            episode = run_episode(env, agent, seed, reset_policy=agent.reset, record=True,
                                  label=getattr(agent, "label", None))
            steps += episode.length
            if job.task_index is not None:
                episode.frames["task_index"] = np.full(episode.length, job.task_index)
            if episode.success or job.keep_failures:
                pending.append(EpisodeRecord(index, seed, episode.success, to_features(episode.frames, features)))
                buffered_frames += episode.length
            else:
                dropped_failures.append(index)
            if buffered_frames >= job.flush_frames:
                shard.commit(pending, dropped_failures)
                pending, dropped_failures, buffered_frames = [], [], 0
                crash_point("collect-commit")
            settled_count += 1
            if report_progress is not None:
                report_progress(profile.robot_id, settled_count)
        shard.commit(pending, dropped_failures)
        kept, frames = shard.num_episodes, shard.num_frames
        dropped = len(shard.failed)
    env.close()
    return RobotReport(profile.robot_id, profile.site, kept, dropped, frames, steps, time.perf_counter() - started)


def collect_robot_on_worker(job: RobotJob) -> RobotReport:
    """``collect_robot`` as a dask task: progress goes out as events on ``PROGRESS_TOPIC``.

    At most one event per ``PROGRESS_INTERVAL`` seconds, and always the robot's last one.
    """
    from distributed import get_worker

    worker = get_worker()
    last_sent = float("-inf")

    def report_progress(robot: int, settled: int) -> None:
        nonlocal last_sent
        if settled == job.episodes or time.monotonic() - last_sent >= PROGRESS_INTERVAL:
            worker.log_event(PROGRESS_TOPIC, {"robot": robot, "settled": settled})
            last_sent = time.monotonic()

    return collect_robot(job, report_progress)
