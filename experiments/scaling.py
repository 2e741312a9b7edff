"""Data scaling: fleet success against training robots and against episodes per robot (issue 30, part 1).

    .venv/bin/python -m experiments.scaling      # pick_place and push, 3 training seeds per point
    .venv/bin/python -m experiments.scaling --setting visuomotor   # the cnn from cameras (~160 min)
    .venv/bin/python -m experiments.scaling --tasks reach --robots 1 2 --episodes 2 --fixed-episodes 2 \\
        --fixed-robots 2 --seeds 0 --min-steps 20 --max-steps 20 --hidden 16 --batch-size 8 --ranks 1 \\
        --eval-robots 3 --eval-episodes 1 --out /tmp/scaling --docs /tmp/scaling/scaling.md \\
        --media /tmp/scaling --results-dir /tmp/scaling            # a minute: what CI runs

Goal: know how success grows with data, and how many robots and episodes reach 90% of
the scripted expert. Two sweeps per task, each point trained once per training seed
(``--seeds``, bc.py ``--seed``):

- robots: ``k`` robots (``--robots``, default 1 3 9 27 81) x ``--fixed-episodes`` (10) each;
- episodes: ``--fixed-robots`` (9) robots x ``n`` episodes each (``--episodes``, 2 5 10 20 40).

``--setting`` picks the defaults (``SETTINGS``): ``state``, the MLP on state inputs (bc.py
``--inputs state``); ``visuomotor``, the cnn from the front and wrist cameras and the arm's
own state (``--inputs proprio+cameras``, as the visuomotor full run), with two training seeds
and a smaller sweep (robots 3 9 27, episodes 5 10 20), since a point trains ~10x slower. Its
results go to ``scaling_visuomotor.json`` and a section of its own.

Per task, as a user would run it (each stage a subprocess, its output in a log under
``--out/TASK``): ``collect`` once, the largest fleet and episode count any point needs
(81 x 40); each point trains on a subset of it, robots ``0..k-1`` (bc.py ``--robots``) and
each robot's first ``n`` episodes (``--episodes-per-robot``), so smaller sets are nested in
larger ones. Training steps scale with the data at a fixed number of passes over it, capped
to keep every point cheap on 2 cores: ``steps = clamp(steps_per_demo x k x n, min_steps,
max_steps)`` (default 10 per demonstration, between 500 and 5000: 1 to 3 minutes at the
~30 steps/s of the 512x3 MLP at batch 256 on 2 ranks). All the data trains (no validation split);
a point with fewer frames per rank than ``--batch-size`` (push's single robot) trains on
all of them each step. bc.py normalises with the statistics of the whole collection, so a
small fleet's policy knows the fleet's ranges of states and actions (not its demonstrations).

Evaluation: every point and, once per task, the expert run ``evaluate`` on the same robots
and held-out seeds: ``--eval-robots`` (30) robots that no point trained on, ids from the
collected fleet's size up (81..110; sites round-robin, 10 each). Evaluating the training
fleet's first robots instead would test small fleets mostly on robots they never saw and
large ones only on robots they trained on, mixing generalisation with memorisation; a
fleet's policy serves robots that join it, so held-out robots are the honest fleet measure.
The script checks that every evaluation ran on the expert's seeds.

Figures per point: success averaged over the seeds with a 95% Wilson interval pooled over
their episodes (evaluation noise), the seeds' min, max and standard deviation (training
noise), the same per site, and over the expert's. Fit per task, for each sweep and for all
points: error = 1 - success/expert = c x demos^b by least squares in log-log space (demos
= k x n; a point at or above the expert counts as half an episode short of it), with R^2
in log space; from it the robots (at ``--fixed-episodes``) and episodes (at
``--fixed-robots``) where success reaches 90% of the expert's, and the smallest measured
point that already does.

Every stage resumes: collect carries on, training resumes from its checkpoint and a
finished evaluation of the final checkpoint is kept (it prints "skipped"). Writes
``--results-dir/scaling.json``, the table in ``--docs`` (section ``scaling_data``) and the
plots ``--media/scaling_robots.png`` and ``scaling_episodes.png``, with the command.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from core.files import REPO
from core.options import parse_config
from dataset.episodes import select_episodes
from dataset.fleet_store import FleetStore
from eval.report import wilson_interval
from experiments.full_run import StageClock, evaluate_command, finished_evaluation, percent, seeds_of, trained_step
from experiments.scaling_config import ScalingConfig
from experiments.scaling_report import publish
from sim.fleet import SITES

def collect_command(config: ScalingConfig, task: str, data: Path) -> list[str]:
    """The one collection of ``task`` every point trains on: ``config.fleet``, with the setting's cameras."""
    robots, episodes = config.fleet
    cameras = ["--cameras", *config.cameras, "--image-size", str(config.image_size)] if config.cameras else []
    return [sys.executable, "-m", "collect.cli", "--task", task, "--robots", str(robots), "--episodes", str(episodes),
            "--seed", str(config.seed), "--workers", str(config.workers), "--out", str(data), "--quiet", *cameras]


def train_command(config: ScalingConfig, data: Path, run: Path, robots: int, episodes: int, seed: int,
                  batch_size: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={config.ranks}",
            str(REPO / "train" / "bc.py"), "--data", str(data), "--out", str(run), "--policy", config.policy,
            "--inputs", config.inputs, "--robots", *map(str, range(robots)), "--episodes-per-robot", str(episodes),
            "--max-steps", str(config.steps(robots * episodes)), "--batch-size", str(batch_size),
            "--val-fraction", "0", "--hidden", *map(str, config.hidden), "--seed", str(seed)]


def pooled(figures: list[dict]) -> dict:
    """Success over the episodes of several evaluations together, with its 95% Wilson interval."""
    n, successes = sum(f["n_episodes"] for f in figures), sum(f["n_success"] for f in figures)
    return {"n_episodes": n, "pc_success": 100 * successes / n, "ci95": wilson_interval(successes, n)}


def point_result(task: str, k: int, n: int, sweeps: list[str], infos: dict[int, dict], expert: dict,
                 training: dict) -> dict:
    """One point: per seed, and over the seeds (pooled interval, spread), per site, over the expert's."""
    rates = [info["fleet"]["pc_success"] for info in infos.values()]
    success = pooled([info["fleet"] for info in infos.values()])
    sites = [site for site in SITES if site in expert["per_site"]]
    return {"task": task, "sweeps": sweeps, "robots": k, "episodes_per_robot": n, "demos": k * n, **training,
            "seeds": [{"seed": seed, **{key: info["fleet"][key] for key in ("pc_success", "ci95")},
                       "per_site": {site: info["per_site"][site]["pc_success"] for site in sites}}
                      for seed, info in infos.items()],
            "success": {**success, "std": float(np.std(rates)), "min": min(rates), "max": max(rates)},
            "per_site": {site: pooled([info["per_site"][site] for info in infos.values()]) for site in sites},
            "over_expert": success["pc_success"] / expert["fleet"]["pc_success"]}


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(ScalingConfig, __doc__, argv)
    command = "python -m experiments.scaling" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    evaluated = config.eval_robots * config.eval_episodes
    held_out = ["--robot-offset", str(config.fleet[0])]  # robots no point trained on
    points, experts, seconds, result = [], {}, {}, {}
    for task in config.tasks:
        out = Path(config.out).resolve() / task  # absolute: the stages run with the repository as their directory
        out.mkdir(parents=True, exist_ok=True)
        clock, data = StageClock(out / "seconds.json"), out / "data"
        clock.run("collect", f"{task} collect", collect_command(config, task, data), out / "collect.log")
        clock.run("expert", f"{task} expert",
                  evaluate_command(config, ["--expert", "--task", task, *held_out], out / "expert"), out / "expert.log",
                  done=finished_evaluation(out / "expert", None, evaluated) is not None)
        experts[task] = finished_evaluation(out / "expert", None, evaluated)
        if not experts[task]["fleet"]["pc_success"]:
            raise SystemExit(f"error: the {task} expert never succeeded on the held-out robots: nothing to scale to")
        store = FleetStore.open(data)
        for (k, n), sweeps in config.points().items():
            frames = sum(e.length for e in select_episodes(store, robots=range(k), per_robot=n))
            training = {"steps": config.steps(k * n), "frames": frames,
                        "batch_size": min(config.batch_size, frames // config.ranks)}  # bc.py needs a full batch
            infos = {}
            for seed in config.seeds:
                name, point = f"{task} {k} x {n} seed {seed}", out / f"r{k}_e{n}" / f"seed{seed}"
                run, evaluation = point / "run", point / "eval"
                point.mkdir(parents=True, exist_ok=True)
                clock.run("train", f"{name} train",
                          train_command(config, data, run, k, n, seed, training["batch_size"]), point / "train.log",
                          done=trained_step(run) == training["steps"])
                clock.run("evaluate", f"{name} evaluate",
                          evaluate_command(config, ["--checkpoint", str(run), *held_out], evaluation), point / "eval.log",
                          done=finished_evaluation(evaluation, trained_step(run), evaluated) is not None)
                infos[seed] = finished_evaluation(evaluation, None, evaluated)
                if seeds_of(infos[seed]) != seeds_of(experts[task]):
                    raise SystemExit(f"error: {name} was evaluated on other seeds than the expert")
            points.append(point_result(task, k, n, sweeps, infos, experts[task], training))
            print(f"{task} {k} x {n}: {percent(points[-1]['success'])}, expert {percent(experts[task]['fleet'])}")
        seconds[task] = {key: round(value) for key, value in clock.seconds.items()}
        result = publish(config, command, points, experts, seconds)
    print("\n".join(result["statements"]))
    return result


if __name__ == "__main__":
    main()
