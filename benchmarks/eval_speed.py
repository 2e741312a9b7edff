"""How fast ``evaluate`` rolls a policy out over a fleet, against a single-process loop.

Every setup does the same job: ``--robots`` robots x ``--episodes`` held-out episodes of
one checkpoint's policy, with the same jobs (``eval.engine.make_jobs``) and the same
rollout code (``eval.rollout.evaluate_robot``, envs in lockstep, one batched policy call
per step):

- ``loop``: every robot's job in this one process, one after another (torch on one
  thread, as on a dask worker). The limit a single core gives.
- ``loop_batch1``: the same with ``--batch 1``: one episode at a time, one policy call
  per env step (what the lockstep batching saves).
- ``eval_1w`` / ``eval_2w``: ``run_evaluation`` on a LocalCluster of 1 and 2 workers,
  timed from the first submit to the last result (the cluster's start and stop and the
  writing of EVAL are reported apart).

The goal (issue: evaluation) is ``eval_2w / loop >= 1.8``. Without ``--checkpoint`` a
small one is made first: the task's expert on the robots, 200 training steps. Rounds
run every setup back to back; ratios are medians of within-round ratios, rates the best
round. Writes benchmarks/results/eval_speed.json and a row in benchmarks/README.md; with
``--checkpoint`` it prints the row, and only ``--out`` writes (the JSON).

    python -m benchmarks.eval_speed [--task pick_place] [--robots 100] [--episodes 10] [--rounds 3]   # ~15 min

The default job is the issue's example (``evaluate --robots 100 --episodes 10``). On a
small job a fresh cluster's first tasks (cold worker processes) weigh: 12 x 8 episodes
(about 5 s of rollouts) came out at 1.41-1.46x on 2 workers, 100 x 10 at 1.80x.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import sim  # noqa: F401  (first: it selects headless rendering before mujoco loads)

import numpy as np
import torch

from benchmarks.common import benchmark_parser, machine_facts, median_ratio, publish
from collect import CollectConfig
from collect.engine import run_collection
from eval import EvalConfig, run_evaluation
from eval.engine import make_jobs
from eval.plan import make_plan
from eval.rollout import evaluate_robot
from train import bc


def make_checkpoint(task: str, robots: int, directory: Path) -> Path:
    """A small policy: 5 expert episodes per robot, 200 training steps (its success does not matter here)."""
    data, run = directory / "fleet", directory / "run"
    run_collection(CollectConfig(robots=robots, episodes=5, task=task, out=str(data), quiet=True))
    bc.main(["--data", str(data), "--out", str(run), "--max-steps", "200", "--log-interval", "200",
             "--val-interval", "200", "--checkpoint-interval", "200"])
    return run


def measure_loop(config: EvalConfig) -> float:
    """Episodes per second of every robot's job run in this process, one after another."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        jobs = make_jobs(config, make_plan(config), Path(config.out) / "videos")
        start = time.perf_counter()
        episodes = sum(len(evaluate_robot(job)) for job in jobs)
        return episodes / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)


def measure_engine(config: EvalConfig, workers: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="robofleet-bench-")) / "eval"
    try:
        start = time.perf_counter()
        info = run_evaluation(replace(config, out=str(out), workers=workers))
        total = time.perf_counter() - start
    finally:
        shutil.rmtree(out.parent)
    eval_s = info["aggregated"]["eval_s"]
    return {"episodes_per_s": info["fleet"]["n_episodes"] / eval_s, "outside_s": total - eval_s,
            "steps": sum(e["steps"] for e in info["per_episode"])}


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--checkpoint", type=Path, help="a trained run (default: make a small one)")
    parser.add_argument("--task", default="pick_place", help="task of the checkpoint made without --checkpoint")
    parser.add_argument("--robots", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="robofleet-bench-"))
    try:
        checkpoint = args.checkpoint or make_checkpoint(args.task, args.robots, scratch)
        config = EvalConfig(checkpoint=str(checkpoint), robots=args.robots, episodes=args.episodes,
                            out=str(scratch / "eval"), quiet=True)
        task = make_plan(config).task_name
        rounds: list[dict[str, float]] = []
        outside, steps = [], 0
        for _ in range(args.rounds):
            rates = {"loop": measure_loop(config), "loop_batch1": measure_loop(replace(config, batch=1))}
            for workers in (1, 2):
                measured = measure_engine(config, workers)
                rates[f"eval_{workers}w"] = measured["episodes_per_s"]
                outside.append(measured["outside_s"])
                steps = measured["steps"]
            rounds.append(rates)
    finally:
        shutil.rmtree(scratch)

    ratios = {
        "eval_1w_vs_loop": median_ratio(rounds, "eval_1w", "loop"),
        "eval_2w_vs_loop": median_ratio(rounds, "eval_2w", "loop"),
        "scaling_1w_to_2w": median_ratio(rounds, "eval_2w", "eval_1w"),
        "loop_vs_loop_batch1": median_ratio(rounds, "loop", "loop_batch1"),
    }
    best = {name: max(r[name] for r in rounds) for name in rounds[0]}
    machine = machine_facts()
    job = f"{task} {args.robots}x{args.episodes}"
    result = {
        "benchmark": "eval_speed", "machine": machine,
        "job": {"task": task, "robots": args.robots, "episodes": args.episodes, "rounds": args.rounds,
                "checkpoint": str(args.checkpoint) if args.checkpoint else "made by the benchmark",
                "env_steps": steps},
        "episodes_per_s_best": {name: round(rate, 2) for name, rate in best.items()},
        "episodes_per_s_rounds": [{name: round(rate, 2) for name, rate in r.items()} for r in rounds],
        "cluster_and_outputs_s": round(float(np.median(outside)), 2),
        "ratios": {name: round(value, 3) for name, value in ratios.items()},
        "goal": {"eval_2w_vs_loop": 1.8, "met": ratios["eval_2w_vs_loop"] >= 1.8},
    }
    header = ["date", "code", "job", "loop ep/s", "loop batch 1", "eval 1w", "eval 2w", "1w/loop", "2w/loop",
              "1w→2w", "lockstep gain"]
    row = [machine["date"], machine["code_version"], f"{job} ({steps} steps)",
           *(f"{best[name]:.1f}" for name in ("loop", "loop_batch1", "eval_1w", "eval_2w")),
           *(f"{ratios[name]:.2f}" for name in ratios)]
    publish("eval_speed", result, header, [row], args, recorded=args.checkpoint is None)
    return result


if __name__ == "__main__":
    main()
