"""How fast ``collect`` records demonstrations, held against the limit and the peer.

Every setup does the same job: ``--robots`` robots x ``--episodes`` episodes of the
task's scripted expert, with each episode's seed from ``sim.fleet.episode_seed``. A group of
tasks (``--task metaworld/mt10``) is shared out over the robots as collect shares it
(``sim.fleet.fleet_task``: robot k runs task k mod n, so ``--robots`` covers the group), and
every setup runs each robot's own task (its env, its expert, its ``task_index`` column). With
``--cameras`` (collect's option) every setup makes its envs with those cameras, so each
step renders them at ``--image-size`` px and collect records the images; the default job
is then 4 x 4, as rendering 2 cameras at 96 px takes ~10 ms a step on llvmpipe.

- ``limit``: the env+expert loop in one process, recording nothing.
- ``limit_2proc``: the same loop split over 2 plain processes (the machine's own
  scaling, with no dask and no recording).
- ``collect_1w`` / ``collect_2w``: ``collect`` on a LocalCluster of 1 and 2 workers,
  writing zarr shards (timed from the first submit to the manifest written, so the
  cluster's start and stop are excluded, as the limit excludes spawning its processes;
  they are reported apart). ``collect_1w_lost`` in the JSON splits what ``collect_1w``
  loses against the limit into writing the stores, the engine outside the robot tasks,
  and the rest (recording, running as a dask task).
- ``vector_2env``: the collector a user would write with gymnasium's
  ``AsyncVectorEnv`` (2 sub-processes, lock-step), writing the same shards. Its
  sub-processes are spawned (a fork of a process that has rendered can hang in its
  first render) and their start and stop are excluded, as for the limit.
- ``write_crc32c`` / ``write_no_checksum``: the cost of the checksums. The job's episodes,
  recorded once, are written into new shards by collect's writer as it is (crc32c on every
  chunk) and with the crc32c codec left out, one after the other in each round;
  ``checksums`` in the JSON gives their rate ratio and the extra write time as a share of
  a ``collect_1w`` step.

``env_steps_rounds`` in the JSON gives each setup's env steps in each round: every setup runs
the same episodes, so they are equal.

The CPU speed of a shared VM drifts by tens of percent from one minute to the next,
so every round runs all setups back to back and ratios are taken within a round. Each
collect setup is bracketed by its limit: half the robots' loop runs just before it and
the other half just after, so a steady drift cancels out of their ratio. The table
shows the median ratio over ``--rounds`` rounds (rates: the best round). Writes
benchmarks/results/collect_speed.json: ``_metaworld`` is added to the name for Meta-World's tasks
(``benchmarks.common.family_name``) and ``_cameras`` with cameras, so each case's figures stay
apart; the rows go to the one table in benchmarks/README.md.

    python -m benchmarks.collect_speed [--robots 16] [--episodes 30] [--task pick_place]
    python -m benchmarks.collect_speed --cameras front wrist [--image-size 96]
    python -m benchmarks.collect_speed --task metaworld/mt10 [--cameras corner2]
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import sim  # first: it selects headless rendering before mujoco loads

import gymnasium as gym
import numpy as np

from benchmarks.common import (benchmark_parser, bracketed, family_name, in_processes, job_options, machine_facts,
                               median_ratio, publish)
from collect import CollectConfig
from collect.engine import CollectionSummary, env_modules, robot_task, run_collection
from collect.worker import to_features
from dataset import writer
from dataset.schema import TASK_FEATURES, features_of
from dataset.shard import store_name
from dataset.writer import EpisodeRecord, ShardWriter
from sim.fleet import RobotProfile, episode_seed, make_fleet, make_robot
from sim.rollout import run_episode
from sim.tasks import TaskSpec, resolve_tasks

# The default (robots, episodes, rounds) of a job, by the tasks' results name and whether it has cameras. A
# round runs the job about 3.5 times over: 4 x 4 with our cameras takes ~30 s a round here. Meta-World's MT10
# needs 10 robots, and its corner2 frame costs several of our two cameras' (benchmarks/README.md, sim_speed_metaworld):
# with it the job is 10 x 1 in 2 rounds.
DEFAULT_JOB = {("collect_speed", False): (16, 30, 5), ("collect_speed", True): (4, 4, 5),
               ("collect_speed_metaworld", False): (10, 10, 5), ("collect_speed_metaworld", True): (10, 1, 2)}


def job_task(job: CollectConfig, robot_id: int) -> tuple[TaskSpec, int | None]:
    """The task robot ``robot_id`` runs in the job and its ``task_index`` (None with one task), as collect gives
    them (``collect.engine.robot_task``)."""
    return robot_task(resolve_tasks(job.task), robot_id)


def make_env(job: CollectConfig, profile: RobotProfile) -> gym.Env:
    """One robot's env for the job (its own task's), with the job's cameras."""
    spec, _ = job_task(job, profile.robot_id)
    return spec.make_env(profile, cameras=job.cameras, image_size=job.image_size)


def make_expert(job: CollectConfig, profile: RobotProfile):
    """One robot's scripted expert for the job (its own task's)."""
    spec, _ = job_task(job, profile.robot_id)
    return spec.make_expert(profile)


def as_stored(job: CollectConfig, robot_id: int, frames: dict[str, np.ndarray], features: dict) -> dict:
    """One episode's recorded columns as collect stores them: with each frame's task in a multi-task job."""
    _, task_index = job_task(job, robot_id)
    if task_index is not None:
        frames = {**frames, "task_index": np.full(len(frames["action"]), task_index)}
    return to_features(frames, features)


def expert_loop(job: CollectConfig, robot_ids: list[int]) -> tuple[int, float]:
    """The limit: run every episode of these robots, rendering the job's cameras and recording
    nothing; returns (env steps, seconds). The tasks' env modules are imported before the clock starts, as
    collect's workers import them as they start (``collect.engine.env_modules``)."""
    for module in env_modules(resolve_tasks(job.task)):
        importlib.import_module(module)
    steps, start = 0, time.perf_counter()
    for profile in (make_robot(robot_id) for robot_id in robot_ids):
        env, expert = make_env(job, profile), make_expert(job, profile)
        for index in range(job.episodes):
            steps += run_episode(env, expert, episode_seed(0, profile.robot_id, index), expert.reset).length
        env.close()
    return steps, time.perf_counter() - start


def measure_limit(job: CollectConfig, robot_ids: list[int], processes: int) -> tuple[int, float]:
    """(env steps, seconds) of the loop over these robots split over ``processes`` spawned ones."""
    return in_processes(expert_loop, [(job, robot_ids[i::processes]) for i in range(processes)])


def bracketed_by_limit(job: CollectConfig, processes: int, setup: Callable[[], float],
                       limit_steps: list[int]) -> tuple[float, float]:
    """(setup's rate, the limit's rate): the limit's even robots just before ``setup()``, odd ones just after;
    the env steps of each half go to ``limit_steps``."""
    def limit(half: int) -> tuple[int, float]:
        steps, seconds = measure_limit(job, list(range(half, job.robots, 2)), processes)
        limit_steps.append(steps)
        return steps, seconds

    return bracketed(setup, limit)


def measure_collect(job: CollectConfig, workers: int, summaries: list[CollectionSummary]) -> float:
    """Steps per second of ``collect`` on a fresh LocalCluster; its summary (cluster start and stop, each
    robot task's seconds) goes to ``summaries``."""
    out = Path(tempfile.mkdtemp(prefix="robofleet-bench-"))
    try:
        summary = run_collection(replace(job, out=str(out / "fleet"), workers=workers))
    finally:
        shutil.rmtree(out)
    summaries.append(summary)
    return summary.steps / summary.wall_seconds


def _vector_pair(job: CollectConfig, profiles: list[RobotProfile], features: dict, out: Path) -> tuple[int, float]:
    """Collect the job's episodes per robot for a group of robots in one AsyncVectorEnv; (env steps, seconds).

    Its sub-processes are spawned, not forked: a process forked from one that has rendered (collect's
    probe renders in this one) can hang in its first render, in EGL on llvmpipe. Their start (spawn,
    imports, each env made) and their stop are left out of the seconds, as the limit leaves out
    spawning its processes and collect its cluster's start.
    """
    # "different": a group's tasks bound their observations differently (the same shapes and dtypes)
    envs = gym.vector.AsyncVectorEnv([partial(make_env, job, p) for p in profiles], context="spawn",
                                     autoreset_mode=gym.vector.AutoresetMode.DISABLED, observation_mode="different")
    try:
        start = time.perf_counter()
        steps = _vector_collect(envs, job, profiles, features, out)
        return steps, time.perf_counter() - start
    finally:
        envs.close()


def _vector_collect(envs: gym.vector.VectorEnv, job: CollectConfig, profiles: list[RobotProfile], features: dict,
                    out: Path) -> int:
    """Run the job's episodes of each robot in its slot of ``envs`` in lock-step and write each robot's
    successes into its shard, as collect does; returns the env steps."""
    episodes = job.episodes
    experts = [make_expert(job, p) for p in profiles]
    count = len(profiles)
    next_index, buffers, kept = [0] * count, [dict() for _ in profiles], [[] for _ in profiles]
    seeds = [episode_seed(0, p.robot_id, 0) for p in profiles]
    observations, _ = envs.reset(seed=seeds)
    for slot in range(count):
        experts[slot].reset(seeds[slot])
    steps = 0
    while min(next_index) < episodes:
        actions = np.stack([experts[k]({key: v[k] for key, v in observations.items()}) for k in range(count)])
        next_observations, rewards, terminated, truncated, infos = envs.step(actions)
        steps += sum(index < episodes for index in next_index)  # idle slots step too, uselessly
        done = terminated | truncated
        for k in range(count):
            if next_index[k] >= episodes:
                continue
            columns = buffers[k]
            for key, value in observations.items():
                columns.setdefault(key, []).append(value[k])
            columns.setdefault("action", []).append(actions[k])
            columns.setdefault("next.reward", []).append(np.float32(rewards[k]))
            columns.setdefault("next.success", []).append(bool(infos["is_success"][k]))
            if done[k]:
                frames = as_stored(job, profiles[k].robot_id, {key: np.stack(v) for key, v in columns.items()},
                                   features)
                if infos["is_success"][k]:
                    kept[k].append(EpisodeRecord(next_index[k], seeds[k], True, frames))
                buffers[k], next_index[k] = {}, next_index[k] + 1
        if done.any():
            seeds = [episode_seed(0, p.robot_id, min(next_index[k], episodes - 1)) for k, p in enumerate(profiles)]
            observations, _ = envs.reset(seed=seeds, options={"reset_mask": done})
            for k in np.flatnonzero(done):
                experts[k].reset(seeds[k])
        else:
            observations = next_observations
    for k, profile in enumerate(profiles):
        with ShardWriter(out / store_name(profile.robot_id), {"profile": profile.to_dict()}, features) as shard:
            shard.commit(kept[k], [])
    return steps


def measure_vector(job: CollectConfig, features: dict, num_envs: int = 2) -> tuple[int, float]:
    """(env steps, seconds) of the ``AsyncVectorEnv`` collector, ``num_envs`` robots at a time (their
    sub-processes' start and stop excluded)."""
    fleet = make_fleet(job.robots)
    out = Path(tempfile.mkdtemp(prefix="robofleet-bench-"))
    try:
        parts = [_vector_pair(job, fleet[i:i + num_envs], features, out) for i in range(0, job.robots, num_envs)]
        return sum(steps for steps, _ in parts), sum(seconds for _, seconds in parts)
    finally:
        shutil.rmtree(out)


def collect_1w_lost(rounds: list[dict[str, float]], summaries: list[CollectionSummary]) -> dict[str, float]:
    """What ``collect_1w`` lost against the limit, as shares of a ``collect_1w`` step (medians over rounds):
    ``lost`` in all, ``writing`` the stores (``write_crc32c``'s time a step), ``outside_tasks`` (the
    engine: manifests, scheduling, results; the wall time not in any robot task), and ``rest``, what
    is left: recording the frames and running as a dask task."""
    lost = [1 - r["collect_1w"] / r["limit"] for r in rounds]
    writing = [r["collect_1w"] / r["write_crc32c"] for r in rounds]
    outside = [1 - sum(report.seconds for report in s.reports) / s.wall_seconds for s in summaries]
    shares = {"lost": lost, "writing": writing, "outside_tasks": outside,
              "rest": [a - b - c for a, b, c in zip(lost, writing, outside)]}
    return {name: round(float(np.median(values)), 4) for name, values in shares.items()}


def recorded_episodes(job: CollectConfig, robot_ids: list[int]) -> tuple[dict, dict[int, list[EpisodeRecord]]]:
    """(features, robot id -> its job's episodes as collect records them)."""
    recorded = {}
    for profile in (make_robot(robot_id) for robot_id in robot_ids):
        env, expert = make_env(job, profile), make_expert(job, profile)
        features = {**features_of(env), **(TASK_FEATURES if job_task(job, profile.robot_id)[1] is not None else {})}
        recorded[profile.robot_id] = []
        for index in range(job.episodes):
            seed = episode_seed(0, profile.robot_id, index)
            episode = run_episode(env, expert, seed, reset_policy=expert.reset, record=True)
            recorded[profile.robot_id].append(EpisodeRecord(index, seed, episode.success,
                                                            as_stored(job, profile.robot_id, episode.frames, features)))
        env.close()
    return features, recorded


@contextlib.contextmanager
def checksums_off() -> Iterator[None]:
    """collect's writer with its codecs minus crc32c, as stores were written before checksums (this measurement only)."""
    layout, meta_codecs = writer.array_layout, writer.META_CODECS

    def without_crc(feature: dict) -> dict:
        options = layout(feature)
        return {**options, "compressors": options["compressors"][:-1]}

    writer.array_layout, writer.META_CODECS = without_crc, meta_codecs[:-1]
    writer._TEMPLATES.clear()  # the empty-store templates carry the codecs
    try:
        yield
    finally:
        writer.array_layout, writer.META_CODECS = layout, meta_codecs
        writer._TEMPLATES.clear()


def write_seconds(features: dict, recorded: dict[int, list[EpisodeRecord]], checksums: bool) -> float:
    """Seconds to write every robot's recorded episodes into new shards (one commit each, as collect's first)."""
    out = Path(tempfile.mkdtemp(prefix="robofleet-bench-"))
    try:
        with contextlib.nullcontext() if checksums else checksums_off():
            start = time.perf_counter()
            for robot_id, episodes in recorded.items():
                with ShardWriter(out / store_name(robot_id), {"profile": make_robot(robot_id).to_dict()},
                                 features) as writer:
                    writer.commit(episodes, [])
            return time.perf_counter() - start
    finally:
        shutil.rmtree(out)


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--robots", type=int, help="default 16, or 4 with --cameras; Meta-World 10")
    parser.add_argument("--episodes", type=int, help="default 30, or 4 with --cameras; Meta-World 10, or 1")
    parser.add_argument("--task", default="pick_place", help="a task or a group (metaworld/mt10)")
    parser.add_argument("--cameras", nargs="+", default=[], help="cameras every setup renders, e.g. front wrist")
    parser.add_argument("--image-size", type=int, default=96, help="camera image height and width")
    parser.add_argument("--rounds", type=int, help="default 5; Meta-World with --cameras 2")
    args = parser.parse_args(argv)
    name = family_name("collect_speed", [args.task])
    defaults = DEFAULT_JOB[name, bool(args.cameras)]
    args.robots, args.episodes, args.rounds = (given if given is not None else default for given, default
                                               in zip((args.robots, args.episodes, args.rounds), defaults))
    try:
        tasks = resolve_tasks(args.task)
    except ValueError as error:
        parser.error(str(error))
    if args.robots < len(tasks):
        parser.error(f"--task {args.task} has {len(tasks)} tasks and each robot runs one: --robots must be at "
                     f"least {len(tasks)}")
    # The benchmark times collection; collect's check of each task's determinism runs outside the timing, and
    # with cameras it would replay each task's first episode twice per collect run.
    job = CollectConfig(robots=args.robots, episodes=args.episodes, task=args.task, cameras=tuple(args.cameras),
                        image_size=args.image_size, quiet=True, check_determinism=False)

    features, recorded = recorded_episodes(job, list(range(job.robots)))
    recorded_steps = sum(len(next(iter(e.frames.values()))) for episodes in recorded.values() for e in episodes)

    rounds: list[dict[str, float]] = []
    round_steps: list[dict[str, int]] = []
    summaries: dict[int, list[CollectionSummary]] = {1: [], 2: []}  # by workers
    for _ in range(args.rounds):
        rates, limit_steps, limit_2proc_steps = {}, [], []
        rates["collect_1w"], rates["limit"] = bracketed_by_limit(
            job, processes=1, setup=lambda: measure_collect(job, workers=1, summaries=summaries[1]),
            limit_steps=limit_steps)
        rates["collect_2w"], rates["limit_2proc"] = bracketed_by_limit(
            job, processes=2, setup=lambda: measure_collect(job, workers=2, summaries=summaries[2]),
            limit_steps=limit_2proc_steps)
        vector_steps, vector_seconds = measure_vector(job, features)
        rates["vector_2env"] = vector_steps / vector_seconds
        # Writing alone, with crc32c on every chunk and without: steps written per second.
        rates["write_crc32c"] = recorded_steps / write_seconds(features, recorded, checksums=True)
        rates["write_no_checksum"] = recorded_steps / write_seconds(features, recorded, checksums=False)
        rounds.append(rates)
        round_steps.append({"limit": sum(limit_steps), "limit_2proc": sum(limit_2proc_steps),
                            "collect_1w": summaries[1][-1].steps, "collect_2w": summaries[2][-1].steps,
                            "vector_2env": vector_steps, "write_crc32c": recorded_steps,
                            "write_no_checksum": recorded_steps})

    ratios = {
        "collect_1w_vs_limit": median_ratio(rounds, "collect_1w", "limit"),
        "collect_2w_per_worker_vs_limit": median_ratio(rounds, "collect_2w", "limit", 2.0),
        "collect_2w_vs_limit_2proc": median_ratio(rounds, "collect_2w", "limit_2proc"),
        "scaling_1w_to_2w": median_ratio(rounds, "collect_2w", "collect_1w"),
        "machine_scaling_1proc_to_2proc": median_ratio(rounds, "limit_2proc", "limit"),
        "collect_2w_vs_vector_2env": median_ratio(rounds, "collect_2w", "vector_2env"),
    }
    checksums = {  # the extra write time per step, against the writer without them and against a collect_1w step
        "write_rate_crc32c_vs_none": round(median_ratio(rounds, "write_crc32c", "write_no_checksum"), 3),
        "share_of_collect_1w_step": round(float(np.median(
            [(1 / r["write_crc32c"] - 1 / r["write_no_checksum"]) * r["collect_1w"] for r in rounds])), 4),
    }
    best = {name: max(r[name] for r in rounds) for name in rounds[0]}
    machine = machine_facts()
    result = {
        "benchmark": "collect_speed", "machine": machine, "job": job_options(args),
        "steps_per_s_best": {name: round(rate) for name, rate in best.items()},
        "steps_per_s_rounds": [{name: round(rate) for name, rate in r.items()} for r in rounds],
        "env_steps_rounds": round_steps,
        "cluster_start_stop_s": round(float(np.median([s.cluster_seconds for s in summaries[1] + summaries[2]])), 2),
        "collect_1w_lost": collect_1w_lost(rounds, summaries[1]),
        "ratios": {name: round(value, 3) for name, value in ratios.items()},
        "checksums": checksums,
    }
    header = ["date", "code", "job", "limit", "limit 2 proc", "collect 1w", "collect 2w", "vector 2 envs",
              "1w/limit", "2w/(2x limit)", "2w/limit 2 proc", "1w→2w", "machine 1→2 proc", "2w/vector"]
    cameras = f" {'+'.join(job.cameras)} {job.image_size}px" if job.cameras else ""
    row = [machine["date"], machine["code_version"], f"{args.task} {args.robots}x{args.episodes}{cameras}",
           *(round(best[name]) for name in ("limit", "limit_2proc", "collect_1w", "collect_2w", "vector_2env")),
           *(f"{ratios[name]:.2f}" for name in ratios)]
    # A camera run keeps its own JSON (the state figures stay in collect_speed.json); the table is shared.
    publish(f"{name}_cameras" if job.cameras else name, result, header, [row], args, table="collect_speed")
    return result


if __name__ == "__main__":
    main()
