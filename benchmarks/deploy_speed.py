"""How fast a fleet-learning round deploys its policy, held against the loop limit.

Every setup does the same job: one deployment round (train/fleet/deploy.py) of a policy on
``--robots`` robots x ``--episodes`` episodes, the robots split into ``--operators`` operator
groups (robot r in group r mod K) and each group stepped in lockstep, one episode of each
robot per wave, with the episode seeds of round 1's stream (``episode_seed(0, r, wave,
"fleet", 1)``). Every step renders the job's cameras and runs one batched forward pass of
the policy for the group (``FleetDriver``, action chunks as evaluate runs them).

- ``limit``: the same groups' waves in one process: env step, render and batched inference,
  nothing else. No recording, no dask, and no expert help: the policy acts at every step
  (the loop's raw cost). Making the envs and loading the policy are outside its timing.
- ``limit_2proc``: the same limit with the groups split over 2 plain processes (the
  machine's own scaling).
- ``deploy_1w`` / ``deploy_2w``: ``deploy_round`` on a LocalCluster of 1 and 2 workers, one
  dask task per group, recording every frame to zarr shards, with the gate and the expert
  help of a round (``--gate``, ``--help-steps``, ``--segment-steps``). Timed from the first
  submit to the manifest written (``CollectionSummary.wall_seconds``), so the cluster's
  start and stop are excluded, as the limit excludes spawning its processes; they are
  reported apart. A fresh worker's first task imports torch and the deployment's code within
  that timing (dask's workers preload only collect.worker): ``deploy_imports_s`` in the JSON
  is what that import takes in a fresh process, measured once a round.

The help costs the deployment what the expert's actions cost (the policy's batched pass runs
for the whole group either way), and episodes the expert finishes end early: rates are env
steps per second, so the setups compare though their steps differ. ``expert_share`` in the
JSON is the share of the deployed steps the expert acted in; ``--help-steps 0`` deploys the
very rollouts the limit runs.

The policy is made at run time, freshly initialised (benchmarks/synthetic.py): a ``--policy``
on the task's proprioception and cameras, nothing trained or downloaded. An untrained policy
rarely ends an episode early, so most episodes run to the task's step limit.

The issue's goals (fleet learning, deployment speed) are ``deploy_1w / limit >= 0.9`` and
``deploy_2w / deploy_1w >= 1.8``. The CPU speed of a shared VM drifts from one minute to the
next, so every round runs all setups back to back and ratios are taken within a round; each
deploy setup is bracketed by its limit (the first half of every group's waves just before
it, the rest just after), so a steady drift cancels out of their ratio. Ratios are medians
over ``--rounds`` rounds, rates the best round. The default job (the recorded fleet-learning
run's setting: pick_place, front and wrist cameras at 64 px, a cnn, the stall gate, 5 robots
an operator and its help of 30 expert steps per robot episode) writes
benchmarks/results/deploy_speed.json and a row in benchmarks/README.md; any other job only
prints its row, and ``--out`` writes its JSON.

    python -m benchmarks.deploy_speed [--robots 20] [--episodes 2] [--operators 4] [--rounds 3]   # ~10 min
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import sim  # noqa: F401  (first: it selects headless rendering before mujoco loads)

import numpy as np
import torch

from benchmarks.common import (benchmark_parser, bracketed, default_job, in_processes, job_options, machine_facts,
                               median_ratio, publish)
from benchmarks.synthetic import synthetic_checkpoint, task_features
from collect.config import CollectConfig
from sim.fleet import episode_seed, make_fleet
from sim.tasks import resolve_task
from train.checkpoint import load_policy
from train.policies.options import PolicyOptions
from train.fleet.deploy import LEDGERS, Help, deploy_round
from train.fleet.driver import FleetDriver
from train.fleet.gates import MEASURES_DISAGREEMENT, MODES, GateOptions
from train.fleet.operators import operator_groups

SEED, ROUND = 0, 1  # the fleet seed and the round whose seeds every setup runs
HELP_PER_EPISODE = 30  # the recorded run's expert steps per robot episode: 3000 for 50 robots x 2 episodes
SETUPS = ("limit", "limit_2proc", "deploy_1w", "deploy_2w")
REPO = Path(__file__).resolve().parent.parent
RATIOS = {  # name -> (numerator, denominator): setups' rates within a round
    "deploy_1w_vs_limit": ("deploy_1w", "limit"),
    "scaling_1w_to_2w": ("deploy_2w", "deploy_1w"),
    "deploy_2w_vs_limit_2proc": ("deploy_2w", "limit_2proc"),
    "machine_scaling_1proc_to_2proc": ("limit_2proc", "limit"),
}
GOALS = {"deploy_1w_vs_limit": 0.9, "scaling_1w_to_2w": 1.8}


@dataclass(frozen=True)
class DeployJob:
    """One round's deployment, as every setup runs it (plain data: it travels to spawned processes)."""

    task: str
    robots: int
    episodes: int
    operators: int
    cameras: tuple[str, ...]
    image_size: int
    checkpoint: str
    help: Help
    help_steps: int

    def groups(self) -> list[list[int]]:
        """The robots of each operator group, as ``deploy_round`` splits the fleet."""
        return operator_groups([profile.robot_id for profile in make_fleet(self.robots, SEED)], self.operators)

    def waves(self, half: int) -> range:
        """The waves (episode indices) of the first (0) or second (1) half of the job."""
        middle = self.episodes // 2
        return range(0, middle) if half == 0 else range(middle, self.episodes)

    def collection(self, out: Path, workers: int) -> CollectConfig:
        """``deploy_round``'s configuration of the job, into ``out`` on ``workers`` local workers."""
        return CollectConfig(robots=self.robots, episodes=self.episodes, task=self.task, out=str(out), seed=SEED,
                             cameras=self.cameras, image_size=self.image_size, keep_failures=True, workers=workers,
                             quiet=True, check_determinism=False)


def lockstep_wave(robots: list[int], wave: int, envs: list, driver: FleetDriver) -> int:
    """One episode of each of a group's robots, stepped in lockstep with one batched policy pass a step
    (the whole group's, as a deployment runs it); the env steps taken."""
    seeds = [episode_seed(SEED, robot, wave, "fleet", ROUND) for robot in robots]
    observations = [env.reset(seed=seed)[0] for env, seed in zip(envs, seeds)]
    driver.reset()
    active, steps = np.ones(len(envs), dtype=bool), 0
    while active.any():
        actions, _ = driver({name: np.stack([o[name] for o in observations]) for name in driver.policy.spec.features})
        for robot in np.flatnonzero(active):
            observations[robot], _, terminated, truncated, _ = envs[robot].step(actions[robot])
            active[robot] = not (terminated or truncated)
            steps += 1
    return steps


def policy_loop(job: DeployJob, groups: list[list[int]], half: int) -> tuple[int, float]:
    """The limit: the waves of ``half`` of these groups, one group after another, recording nothing and
    helping nobody (torch on one thread, as on a dask worker); returns (env steps, seconds of the loop)."""
    torch.set_num_threads(1)
    spec, fleet = resolve_task(job.task), make_fleet(job.robots, SEED)
    policy, _ = load_policy(job.checkpoint)
    driver = FleetDriver(policy, measure=job.help.mode in MEASURES_DISAGREEMENT)
    steps, seconds = 0, 0.0
    for robots in groups:
        envs = [spec.make_env(fleet[robot], cameras=job.cameras, image_size=job.image_size) for robot in robots]
        start = time.perf_counter()
        steps += sum(lockstep_wave(robots, wave, envs, driver) for wave in job.waves(half))
        seconds += time.perf_counter() - start
        for env in envs:
            env.close()
    return steps, seconds


def measure_limit(job: DeployJob, processes: int, half: int) -> tuple[int, float]:
    """(env steps, seconds) of the limit's ``half`` with the groups split over ``processes`` spawned ones."""
    groups = job.groups()
    return in_processes(policy_loop, [(job, groups[i::processes], half) for i in range(processes)])


def expert_steps(store: Path) -> int:
    """The expert-acted steps of a deployed round's store, from its operators' ledgers."""
    return sum(sum(json.loads(ledger.read_text()).values()) for ledger in (store / LEDGERS).glob("group_*.json"))


def measure_deploy(job: DeployJob, workers: int, extras: list[dict]) -> float:
    """Steps per second of ``deploy_round`` on a fresh LocalCluster of ``workers``; its cluster's start and
    stop and the expert's share of the steps go to ``extras``."""
    out = Path(tempfile.mkdtemp(prefix="robofleet-bench-"))
    try:
        summary = deploy_round(job.collection(out / "round", workers), job.checkpoint, ROUND, job.help,
                               job.help_steps, {"source": "benchmarks.deploy_speed"})
        expert = expert_steps(out / "round")
    finally:
        shutil.rmtree(out)
    extras.append({"cluster_s": summary.cluster_seconds, "expert_share": expert / summary.steps})
    return summary.steps / summary.wall_seconds


def deploy_imports_seconds() -> float:
    """Seconds a fresh process that has imported what dask's workers preload (collect.worker) takes to import
    the deployment's code (train.fleet.deploy): what a fresh worker's first task pays within the deploy timing."""
    code = ("import time, collect.worker; start = time.perf_counter(); import train.fleet.deploy; "
            "print(time.perf_counter() - start)")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return float(printed.stdout.split()[-1])  # the last word: an import may print before it


def run_rounds(job: DeployJob, rounds: int) -> tuple[list[dict[str, float]], list[dict]]:
    """Every setup's steps per second in each round, the deploy setups' extras and each round's import time."""
    measured, extras, imports = [], [], []
    for _ in range(rounds):
        rates = {}
        for workers, limit in ((1, "limit"), (2, "limit_2proc")):
            rates[f"deploy_{workers}w"], rates[limit] = bracketed(
                lambda: measure_deploy(job, workers, extras), lambda half: measure_limit(job, workers, half))
        measured.append({name: rates[name] for name in SETUPS})
        imports.append(deploy_imports_seconds())
    return measured, extras, imports


def parse(argv: list[str] | None) -> tuple[object, bool]:
    """The options, with ``--help-steps`` filled in, and whether they ask for the benchmark's own job."""
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--robots", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per robot (waves), at least 2")
    parser.add_argument("--operators", type=int, default=4, help="operator groups: dask tasks, at least 2")
    parser.add_argument("--cameras", nargs="+", default=["front", "wrist"])
    parser.add_argument("--image-size", type=int, default=64, help="camera image height and width")
    parser.add_argument("--policy", choices=("cnn", "act", "diffusion"), default="cnn",
                        help="the kind of the freshly initialised policy")
    parser.add_argument("--gate", choices=MODES, default="stall", help="who asks for help in the deploy setups")
    parser.add_argument("--help-steps", type=int, help="expert steps of the round, fleet-wide (default: "
                        f"{HELP_PER_EPISODE} per robot episode; 0: no help)")
    parser.add_argument("--segment-steps", type=int, default=30, help="expert steps a hand-over lasts at most")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error("--episodes must be at least 2: each limit runs half the waves before its deploy setup "
                     "and half after")
    if not 2 <= args.operators <= args.robots:
        parser.error("--operators must be at least 2 (a group for each of 2 workers) and at most --robots")
    for name in ("rounds", "image_size", "segment_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.help_steps is not None and args.help_steps < 0:
        parser.error("--help-steps must not be negative")
    own = default_job(parser, args)
    if args.help_steps is None:
        args.help_steps = HELP_PER_EPISODE * args.robots * args.episodes
    return args, own


def make_job(args, scratch: Path) -> DeployJob:
    """The job of the options, its policy written into ``scratch``."""
    cameras = tuple(args.cameras)
    options = PolicyOptions(policy=args.policy, inputs="proprio+cameras")
    checkpoint = synthetic_checkpoint(options, task_features(args.task, cameras, args.image_size), args.task)
    return DeployJob(args.task, args.robots, args.episodes, args.operators, cameras, args.image_size,
                     str(checkpoint.write(scratch / "policy")), Help(args.gate, GateOptions(), args.segment_steps,
                                                                      args.operators), args.help_steps)


def table_row(args, result: dict) -> list:
    """The job's row of the table: its rates (best round), ratios and the expert's share."""
    machine, best, ratios = result["machine"], result["steps_per_s_best"], result["ratios"]
    job = (f"{args.task} {args.robots}x{args.episodes}, {args.operators} groups, {'+'.join(args.cameras)} "
           f"{args.image_size}px, {args.policy}, {args.gate} {args.help_steps}")
    return [machine["date"], machine["code_version"], job, *(round(best[name]) for name in SETUPS),
            *(f"{ratios[name]:.2f}" for name in RATIOS), f"{result['expert_share']:.2f}"]


def main(argv: list[str] | None = None) -> dict:
    args, own = parse(argv)
    scratch = Path(tempfile.mkdtemp(prefix="robofleet-bench-"))
    try:
        rounds, extras, imports = run_rounds(make_job(args, scratch), args.rounds)
    finally:
        shutil.rmtree(scratch)

    ratios = {name: median_ratio(rounds, *setups) for name, setups in RATIOS.items()}
    result = {
        "benchmark": "deploy_speed", "machine": machine_facts(), "job": job_options(args),
        "steps_per_s_best": {name: round(max(r[name] for r in rounds), 1) for name in SETUPS},
        "steps_per_s_rounds": [{name: round(rate, 1) for name, rate in r.items()} for r in rounds],
        "cluster_start_stop_s": round(float(np.median([extra["cluster_s"] for extra in extras])), 2),
        "deploy_imports_s": round(float(np.median(imports)), 2),
        "expert_share": round(float(np.median([extra["expert_share"] for extra in extras])), 3),
        "ratios": {name: round(value, 3) for name, value in ratios.items()},
        "goals": {name: {"goal": goal, "met": ratios[name] >= goal} for name, goal in GOALS.items()},
    }
    header = ["date", "code", "job", "limit", "limit 2 proc", "deploy 1w", "deploy 2w", "1w/limit", "1w→2w",
              "2w/limit 2 proc", "machine 1→2 proc", "expert share"]
    publish("deploy_speed", result, header, [table_row(args, result)], args, recorded=own)
    return result


if __name__ == "__main__":
    main()
