"""How fast ``collect`` records demonstrations, held against the limit and the peer.

Every setup does the same job: ``--robots`` robots x ``--episodes`` episodes of the
task's scripted expert, with each episode's seed from ``sim.fleet.episode_seed``.

- ``limit``: the env+expert loop in this one process, recording nothing.
- ``limit_2proc``: the same loop split over 2 plain processes (the machine's own
  scaling, with no dask and no recording).
- ``collect_1w`` / ``collect_2w``: ``collect`` on a LocalCluster of 1 and 2 workers,
  writing zarr shards (timed from the first submit to the manifest written, so the
  cluster's start and stop are excluded, as the limit excludes spawning its processes;
  they are reported apart).
- ``vector_2env``: the collector a user would write with gymnasium's
  ``AsyncVectorEnv`` (2 sub-processes, lock-step), writing the same shards.

The CPU speed of a shared VM drifts by tens of percent from one minute to the next,
so every round runs all setups back to back and ratios are taken within a round. Each
collect setup is bracketed by its limit: half the robots' loop runs just before it and
the other half just after, so a steady drift cancels out of their ratio. The table
shows the median ratio over ``--rounds`` rounds (rates: the best round). Writes
benchmarks/results/collect_speed.json and appends to the table in benchmarks/README.md.

    python -m benchmarks.collect_speed [--robots 16] [--episodes 30] [--task pick_place]
"""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import sim  # first: it selects headless rendering before mujoco loads

import gymnasium as gym
import numpy as np

from benchmarks.common import benchmark_parser, machine_facts, median_ratio, publish
from collect import CollectConfig
from collect.engine import run_collection
from collect.schema import features_of
from collect.shard import EpisodeRecord, ShardWriter, store_name
from collect.worker import to_features
from sim.fleet import episode_seed, make_fleet, make_robot
from sim.rollout import run_episode


def expert_loop(task: str, robot_ids: list[int], episodes: int) -> tuple[int, float]:
    """The limit: run every episode of these robots, record nothing; returns (env steps, seconds)."""
    spec = sim.resolve_task(task)
    steps, start = 0, time.perf_counter()
    for profile in (make_robot(robot_id) for robot_id in robot_ids):
        env, expert = spec.make_env(profile), spec.make_expert(profile)
        for index in range(episodes):
            steps += run_episode(env, expert, episode_seed(0, profile.robot_id, index), expert.reset).length
        env.close()
    return steps, time.perf_counter() - start


def measure_limit(task: str, robot_ids: list[int], episodes: int, processes: int) -> tuple[int, float]:
    """(env steps, seconds) of the loop over these robots split over ``processes``.

    With several processes, each is timed inside (spawn and imports excluded) and the
    slowest one counts.
    """
    groups = [robot_ids[i::processes] for i in range(processes)]
    if processes == 1:
        return expert_loop(task, groups[0], episodes)
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        results = pool.starmap(expert_loop, [(task, group, episodes) for group in groups])
    return sum(steps for steps, _ in results), max(seconds for _, seconds in results)


def bracketed_by_limit(task: str, robots: int, episodes: int, processes: int,
                       setup: Callable[[], float]) -> tuple[float, float]:
    """(setup's rate, the limit's rate): the limit's even robots just before ``setup()``, odd ones just after."""
    before = measure_limit(task, list(range(0, robots, 2)), episodes, processes)
    rate = setup()
    after = measure_limit(task, list(range(1, robots, 2)), episodes, processes)
    return rate, (before[0] + after[0]) / (before[1] + after[1])


def measure_collect(task: str, robots: int, episodes: int, workers: int, cluster_seconds: list[float]) -> float:
    """Steps per second of ``collect`` on a fresh LocalCluster; its start and stop go to ``cluster_seconds``."""
    out = Path(tempfile.mkdtemp(prefix="robofleet-bench-"))
    try:
        summary = run_collection(CollectConfig(robots=robots, episodes=episodes, task=task, out=str(out / "fleet"),
                                               workers=workers, quiet=True))
    finally:
        shutil.rmtree(out)
    cluster_seconds.append(summary.cluster_seconds)
    return summary.steps / summary.wall_seconds


def _vector_pair(task: str, profiles: list, episodes: int, out: Path) -> int:
    """Collect ``episodes`` per robot for a group of robots in one AsyncVectorEnv."""
    spec = sim.resolve_task(task)
    envs = gym.vector.AsyncVectorEnv([lambda p=p: spec.make_env(p) for p in profiles],
                                     autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    experts = [spec.make_expert(p) for p in profiles]
    features = features_of(spec.make_env(profiles[0]))
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
                frames = to_features({key: np.stack(v) for key, v in columns.items()}, features)
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
    envs.close()
    for k, profile in enumerate(profiles):
        with ShardWriter(out / store_name(profile.robot_id), {"profile": profile.to_dict()}, features) as shard:
            shard.commit(kept[k], [])
    return steps


def measure_vector(task: str, robots: int, episodes: int, num_envs: int = 2) -> float:
    fleet = make_fleet(robots)
    out = Path(tempfile.mkdtemp(prefix="robofleet-bench-"))
    try:
        start = time.perf_counter()
        steps = sum(_vector_pair(task, fleet[i:i + num_envs], episodes, out) for i in range(0, robots, num_envs))
        return steps / (time.perf_counter() - start)
    finally:
        shutil.rmtree(out)


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--robots", type=int, default=16)
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    job = (args.task, args.robots, args.episodes)

    rounds: list[dict[str, float]] = []
    cluster = []
    for _ in range(args.rounds):
        rates = {}
        rates["collect_1w"], rates["limit"] = bracketed_by_limit(
            *job, processes=1, setup=lambda: measure_collect(*job, workers=1, cluster_seconds=cluster))
        rates["collect_2w"], rates["limit_2proc"] = bracketed_by_limit(
            *job, processes=2, setup=lambda: measure_collect(*job, workers=2, cluster_seconds=cluster))
        rates["vector_2env"] = measure_vector(*job)
        rounds.append(rates)

    ratios = {
        "collect_1w_vs_limit": median_ratio(rounds, "collect_1w", "limit"),
        "collect_2w_per_worker_vs_limit": median_ratio(rounds, "collect_2w", "limit", 2.0),
        "collect_2w_vs_limit_2proc": median_ratio(rounds, "collect_2w", "limit_2proc"),
        "scaling_1w_to_2w": median_ratio(rounds, "collect_2w", "collect_1w"),
        "machine_scaling_1proc_to_2proc": median_ratio(rounds, "limit_2proc", "limit"),
        "collect_2w_vs_vector_2env": median_ratio(rounds, "collect_2w", "vector_2env"),
    }
    best = {name: max(r[name] for r in rounds) for name in rounds[0]}
    machine = machine_facts()
    result = {
        "benchmark": "collect_speed", "machine": machine, "job": vars(args) | {"results_dir": None, "tables": None},
        "steps_per_s_best": {name: round(rate) for name, rate in best.items()},
        "steps_per_s_rounds": [{name: round(rate) for name, rate in r.items()} for r in rounds],
        "cluster_start_stop_s": round(float(np.median(cluster)), 2),
        "ratios": {name: round(value, 3) for name, value in ratios.items()},
    }
    header = ["date", "code", "job", "limit", "limit 2 proc", "collect 1w", "collect 2w", "vector 2 envs",
              "1w/limit", "2w/(2x limit)", "2w/limit 2 proc", "1w→2w", "machine 1→2 proc", "2w/vector"]
    row = [machine["date"], machine["code_version"], f"{args.task} {args.robots}x{args.episodes}",
           *(round(best[name]) for name in ("limit", "limit_2proc", "collect_1w", "collect_2w", "vector_2env")),
           *(f"{ratios[name]:.2f}" for name in ratios)]
    publish("collect_speed", result, header, [row], args)
    return result


if __name__ == "__main__":
    main()
