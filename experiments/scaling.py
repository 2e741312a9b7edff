"""Data scaling: fleet success against training robots and against episodes per robot (issue 30, part 1).

    .venv/bin/python -m experiments.scaling      # pick_place and push, 3 training seeds per point
    .venv/bin/python -m experiments.scaling --tasks reach --robots 1 2 --episodes 2 --fixed-episodes 2 \\
        --fixed-robots 2 --seeds 0 --min-steps 20 --max-steps 20 --hidden 16 --batch-size 8 --ranks 1 \\
        --eval-robots 3 --eval-episodes 1 --out /tmp/scaling --docs /tmp/scaling/scaling.md \\
        --media /tmp/scaling --results-dir /tmp/scaling            # a minute: what CI runs

Goal: know how success grows with data, and how many robots and episodes reach 90% of
the scripted expert. Two sweeps per task, each point trained with the MLP on state inputs
(``train/bc.py --inputs state``) once per training seed (``--seeds``, bc.py ``--seed``):

- robots: ``k`` robots (``--robots``, default 1 3 9 27 81) x ``--fixed-episodes`` (10) each;
- episodes: ``--fixed-robots`` (9) robots x ``n`` episodes each (``--episodes``, 2 5 10 20 40).

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

import math
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.common import machine_facts, write_results
from dataset.episodes import select_episodes
from dataset.fleet_store import FleetStore
from eval.report import wilson_interval
from experiments.common import write_section
from experiments.full_run import StageClock, evaluate_command, finished_evaluation, percent, seeds_of, trained_step
from sim.fleet import SITES
from sim.shared import REPO, check_options, parse_config, repo_relative

NAME, SECTION = "scaling", "scaling_data"
TARGET = 0.9  # success over the expert's that "reaches the expert"
SWEEPS = ("robots", "episodes")


@dataclass
class ScalingConfig:
    tasks: tuple[str, ...] = field(default=("pick_place", "push"), metadata={"help": "tasks, in order"})
    robots: tuple[int, ...] = field(default=(1, 3, 9, 27, 81), metadata={
        "help": "robots sweep: training robots 0..k-1 for each k, at --fixed-episodes each"})
    episodes: tuple[int, ...] = field(default=(2, 5, 10, 20, 40), metadata={
        "help": "episodes sweep: episodes per robot, on --fixed-robots robots"})
    fixed_episodes: int = field(default=10, metadata={"help": "episodes per robot in the robots sweep"})
    fixed_robots: int = field(default=9, metadata={"help": "training robots in the episodes sweep"})
    seeds: tuple[int, ...] = field(default=(0, 1, 2), metadata={"help": "training seeds per point (bc.py --seed)"})
    steps_per_demo: float = field(default=10.0, metadata={"help": "training steps per demonstration, then clamped"})
    min_steps: int = field(default=500, metadata={"help": "fewest training steps of a point"})
    max_steps: int = field(default=5000, metadata={"help": "most training steps of a point"})
    hidden: tuple[int, ...] = field(default=(512, 512, 512), metadata={"help": "MLP hidden widths"})
    batch_size: int = field(default=256, metadata={"help": "windows per rank per step"})
    ranks: int = field(default=2, metadata={"help": "DDP ranks (torchrun processes)"})
    eval_robots: int = field(default=30, metadata={"help": "held-out robots evaluated (ids from the fleet's size up)"})
    eval_episodes: int = field(default=5, metadata={"help": "held-out episodes per evaluated robot"})
    seed: int = field(default=0, metadata={"help": "fleet seed"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers for collect and evaluate"})
    out: str = field(default=f"runs/{NAME}", metadata={"help": "directory for data, runs, evaluations and logs"})
    docs: str = field(default="docs/scaling.md", metadata={"help": "markdown file for the table"})
    media: str = field(default="docs/media", metadata={"help": "where the plots are written"})
    results_dir: str = field(default="experiments/results", metadata={"help": f"where {NAME}.json is written"})

    def __post_init__(self):
        for name in ("tasks", "robots", "episodes", "seeds"):
            if not getattr(self, name):
                raise ValueError(f"--{name} needs at least one value")
        check_options(self, ("fixed_episodes", "fixed_robots", "min_steps", "batch_size", "ranks", "eval_robots",
                             "eval_episodes", "workers"), lambda value: value >= 1, "must be at least 1")
        check_options(self, ("robots", "episodes"), lambda values: min(values) >= 1, "must all be at least 1")
        check_options(self, ("steps_per_demo",), lambda value: value >= 0, "must not be negative")
        check_options(self, ("max_steps",), lambda value: value >= self.min_steps, "must be at least --min-steps")

    @property
    def fleet(self) -> tuple[int, int]:
        """Robots and episodes per robot collected: the most any point trains on."""
        return max(*self.robots, self.fixed_robots), max(*self.episodes, self.fixed_episodes)

    def points(self) -> dict[tuple[int, int], list[str]]:
        """``(robots, episodes per robot)`` of every point, each with the sweeps it belongs to."""
        points: dict[tuple[int, int], list[str]] = {}
        for k in sorted(self.robots):
            points.setdefault((k, self.fixed_episodes), []).append("robots")
        for n in sorted(self.episodes):
            points.setdefault((self.fixed_robots, n), []).append("episodes")
        return points

    def steps(self, demos: int) -> int:
        return min(self.max_steps, max(self.min_steps, round(self.steps_per_demo * demos)))


def train_command(config: ScalingConfig, data: Path, run: Path, robots: int, episodes: int, seed: int,
                  batch_size: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={config.ranks}",
            str(REPO / "train" / "bc.py"), "--data", str(data), "--out", str(run), "--policy", "mlp",
            "--inputs", "state", "--robots", *map(str, range(robots)), "--episodes-per-robot", str(episodes),
            "--max-steps", str(config.steps(robots * episodes)), "--batch-size", str(batch_size),
            "--val-fraction", "0", "--hidden", *map(str, config.hidden), "--seed", str(seed)]


def stage(clock: StageClock, key: str, name: str, done: bool, command: list[str], log: Path) -> None:
    """Run one stage unless it is ``done`` (then say it was skipped)."""
    if done:
        print(f"{name}: finished earlier, skipped")
    else:
        clock.run(key, name, command, log)


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


def fit_power_law(demos: list[float], errors: list[float]) -> dict | None:
    """Least squares of log(error) = log(c) + b log(demos): ``exponent`` b, ``constant`` c, ``r2`` in log space.

    None with fewer than two distinct amounts of data."""
    x, y = np.log(np.asarray(demos, float)), np.log(np.asarray(errors, float))
    if len(set(x.tolist())) < 2:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    residual, spread = float(np.sum((y - intercept - slope * x) ** 2)), float(np.sum((y - y.mean()) ** 2))
    return {"exponent": float(slope), "constant": float(math.exp(intercept)),
            "r2": 1.0 - residual / spread if spread > 0 else 1.0, "n_points": len(x)}


def demos_to_reach(fit: dict) -> float | None:
    """The demonstrations at which the fitted error falls to 1 - TARGET (None if it never falls)."""
    return ((1 - TARGET) / fit["constant"]) ** (1 / fit["exponent"]) if fit["exponent"] < 0 else None


def task_fits(config: ScalingConfig, task: str, points: list[dict]) -> dict:
    """Per sweep and over all points: the fit, where it reaches TARGET, and the smallest measured point that does."""
    fits = {}
    for sweep in (*SWEEPS, "all"):
        members = [p for p in points if p["task"] == task and (sweep == "all" or sweep in p["sweeps"])]
        errors = [max(1 - p["over_expert"], 0.5 / p["success"]["n_episodes"]) for p in members]
        fit = fit_power_law([p["demos"] for p in members], errors)
        if fit is not None:
            demos = demos_to_reach(fit)
            per = {"robots": config.fixed_episodes, "episodes": config.fixed_robots}.get(sweep)
            fit.update(demos_to_reach_target=demos,  # and the sweep's robots, or episodes per robot, for it:
                       count_to_reach_target=None if demos is None or per is None else math.ceil(demos / per),
                       extrapolated=demos is None or demos > max(p["demos"] for p in members))
        reached = [p for p in members if p["over_expert"] >= TARGET]
        first = min(reached, key=lambda p: p["demos"]) if reached else None
        fits[sweep] = {"fit": fit, "measured_reach": first and {k: first[k] for k in
                                                                   ("robots", "episodes_per_robot", "over_expert")}}
    return fits


def statement(config: ScalingConfig, task: str, fits: dict, points: list[dict]) -> str:
    """Plainly: how many robots and episodes reach TARGET of the expert on ``task``, by the fits and as measured."""
    said = []
    for sweep, shape in (("robots", "{} robots x %d episodes" % config.fixed_episodes),
                         ("episodes", "%d robots x {} episodes" % config.fixed_robots)):
        fit = fits[sweep]["fit"]
        if fit is None:
            said.append(f"the {sweep} sweep has too few points for a fit")
        elif fit["count_to_reach_target"] is None:
            said.append(f"the {sweep} fit never reaches it (its error does not fall)")
        else:
            said.append(shape.format(fit["count_to_reach_target"]) + f" by the {sweep} fit"
                        + (" (extrapolated)" if fit["extrapolated"] else ""))
    overall = fits["all"]["fit"]
    if overall is not None and overall["demos_to_reach_target"] is not None:
        said.append(f"{overall['demos_to_reach_target']:.0f} demonstrations in all by the fit over every point")
    reached = fits["all"]["measured_reach"]
    best = max((p for p in points if p["task"] == task), key=lambda p: p["over_expert"])
    measured = (f"Measured: {reached['robots']} x {reached['episodes_per_robot']} already reaches "
                f"{reached['over_expert']:.2f} of the expert" if reached else
                f"No measured point reaches it yet (best: {best['robots']} x {best['episodes_per_robot']} at "
                f"{best['over_expert']:.2f})")
    return f"**{task}**: {TARGET:.0%} of the expert at about " + "; ".join(said) + f". {measured}."


def plot_path(config: ScalingConfig, sweep: str) -> Path:
    return Path(config.media).resolve() / f"{NAME}_{sweep}.png"


def plot(config: ScalingConfig, sweep: str, points: list[dict], experts: dict, fits: dict, path: Path) -> None:
    """Success against the sweep's variable (log x), one panel per task: seeds, means with intervals, fit, expert."""
    from matplotlib.figure import Figure  # renders with Agg: no display needed

    tasks = list(experts)
    figure = Figure(figsize=(4.5 * len(tasks), 3.6), layout="constrained")
    other = config.fixed_episodes if sweep == "robots" else config.fixed_robots
    for axes, task in zip(np.atleast_1d(figure.subplots(1, len(tasks), sharey=True)), tasks):
        members = [p for p in points if p["task"] == task and sweep in p["sweeps"]]
        x = np.array([p["robots" if sweep == "robots" else "episodes_per_robot"] for p in members], float)
        mean = np.array([p["success"]["pc_success"] for p in members])
        low, high = (np.array([p["success"]["ci95"][i] for p in members]) for i in (0, 1))
        seeds = [(xi, seed["pc_success"]) for xi, p in zip(x, members) for seed in p["seeds"]]
        axes.scatter(*zip(*seeds), s=10, color="0.6", zorder=2, label="each training seed")
        axes.errorbar(x, mean, yerr=np.vstack([mean - low, high - mean]), fmt="o", capsize=3, color="tab:blue",
                      label="policy (mean of seeds, 95%)", zorder=3)
        expert = experts[task]["fleet"]["pc_success"]
        axes.axhline(expert, color="black", linestyle="--", label=f"expert {expert:.0f}%")
        axes.axhline(TARGET * expert, color="tab:green", linestyle=":", label=f"{TARGET:.0%} of the expert")
        fit = fits[task][sweep]["fit"]
        if fit is not None:
            grid = np.geomspace(x.min(), x.max() * 3, 100)
            curve = expert * (1 - fit["constant"] * (grid * other) ** fit["exponent"])
            axes.plot(grid, np.clip(curve, 0, None), color="tab:orange",
                      label=f"fit: error = {fit['constant']:.2g} x demos^{fit['exponent']:.2f}, R² {fit['r2']:.2f}")
        axes.set_xscale("log")
        axes.set_xticks(x, [f"{value:g}" for value in x], minor=False)
        axes.minorticks_off()
        axes.set_xlabel(f"training robots (x {other} episodes)" if sweep == "robots"
                        else f"episodes per robot (x {other} robots)")
        axes.set_title(task)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7, loc="lower right")
    figure.axes[0].set_ylabel("held-out success (%)")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100)


def table(config: ScalingConfig, result: dict) -> str:
    facts, fleet = result["machine"], config.fleet
    lines = [f"Measured {facts['date']} on {facts['cores']} cores ({facts['device']}), code {facts['code_version']}: "
             f"MLP {list(config.hidden)} on state inputs, {config.ranks} DDP ranks x batch {config.batch_size} (or a "
             "point's frames per rank, if fewer), "
             f"steps = {config.steps_per_demo:g} per demonstration within [{config.min_steps}, {config.max_steps}], "
             f"training seeds {', '.join(map(str, config.seeds))}; evaluated on held-out robots {fleet[0]}.."
             f"{fleet[0] + config.eval_robots - 1} x {config.eval_episodes} held-out episodes, every point and the "
             "expert on the same seeds. Success: mean over the seeds [95% interval pooled over their episodes], "
             "the seeds' range beside it; per site, the mean.", "", "```bash", result["command"], "```", "",
             "| task | sweep | robots x episodes | demos | steps | success | seeds min-max | over expert | "
             + " | ".join(SITES) + " |", "|---|---|---|---|---|---|---|---|" + "---|" * len(SITES)]
    for task, expert in result["experts"].items():
        sites = [f"{expert['per_site'][site]['pc_success']:.0f}%" for site in SITES if site in expert["per_site"]]
        lines.append(f"| {task} | expert | - | - | - | {percent(expert['fleet'])} | - | 1.00 | " + " | ".join(sites)
                     + " |")
        for p in (p for p in result["points"] if p["task"] == task):
            sites = [f"{p['per_site'][site]['pc_success']:.0f}%" for site in SITES if site in p["per_site"]]
            lines.append(f"| {task} | {', '.join(p['sweeps'])} | {p['robots']} x {p['episodes_per_robot']} "
                         f"| {p['demos']} | {p['steps']} | {percent(p['success'])} "
                         f"| {p['success']['min']:.0f}-{p['success']['max']:.0f}% | {p['over_expert']:.2f} | "
                         + " | ".join(sites) + " |")
    lines += ["", f"Fits of error = 1 - success/expert = c x demos^b (least squares in log space); demos to reach "
              f"{TARGET:.0%} of the expert from the fit.", "",
              "| task | sweep (points) | b | c | R² | demos to reach | measured point that reaches it |",
              "|---|---|---|---|---|---|---|"]
    for task, fits in result["fits"].items():
        for sweep, entry in fits.items():
            fit, reached = entry["fit"], entry["measured_reach"]
            measured = f"{reached['robots']} x {reached['episodes_per_robot']}" if reached else "none"
            if fit is None:
                lines.append(f"| {task} | {sweep} | - | - | - | too few points | {measured} |")
                continue
            demos = fit["demos_to_reach_target"]
            reach = "never" if demos is None else f"{demos:.0f}" + (" (extrapolated)" if fit["extrapolated"] else "")
            lines.append(f"| {task} | {sweep} ({fit['n_points']}) | {fit['exponent']:.2f} | {fit['constant']:.3g} "
                         f"| {fit['r2']:.2f} | {reach} | {measured} |")
    lines += ["", *(line + "\n" for line in result["statements"])]
    docs = Path(config.docs).resolve().parent
    lines += [f"![success against {sweep}]({os.path.relpath(plot_path(config, sweep), docs)})" for sweep in SWEEPS]
    return "\n".join(lines)


def publish(config: ScalingConfig, command: str, points: list[dict], experts: dict, seconds: dict) -> dict:
    """Fits, plots, scaling.json and the doc's section, from every point so far."""
    fits = {task: task_fits(config, task, points) for task in experts}
    plots = {}
    for sweep in SWEEPS:
        plot(config, sweep, points, experts, fits, plot_path(config, sweep))
        plots[sweep] = repo_relative(plot_path(config, sweep))
    result = {"experiment": NAME, "machine": machine_facts(), "config": asdict(config), "command": command,
              "held_out_robots": list(range(config.fleet[0], config.fleet[0] + config.eval_robots)),
              "experts": {task: {key: info[key] for key in ("fleet", "per_site")} for task, info in experts.items()},
              "points": points, "fits": fits,
              "statements": [statement(config, task, fits[task], points) for task in experts],
              "plots": plots, "seconds": seconds}
    write_results(NAME, result, Path(config.results_dir))
    write_section(Path(config.docs), SECTION, "## Data scaling", table(config, result))
    return result


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(ScalingConfig, __doc__, argv)
    command = f"python -m experiments.{NAME}" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    (robots, episodes), evaluated = config.fleet, config.eval_robots * config.eval_episodes
    held_out = ["--robot-offset", str(robots)]  # robots no point trained on
    points, experts, seconds, result = [], {}, {}, {}
    for task in config.tasks:
        out = Path(config.out).resolve() / task  # absolute: the stages run with the repository as their directory
        out.mkdir(parents=True, exist_ok=True)
        clock, data = StageClock(out / "seconds.json"), out / "data"
        clock.run("collect", f"{task} collect", [
            sys.executable, "-m", "collect.cli", "--task", task, "--robots", str(robots), "--episodes", str(episodes),
            "--seed", str(config.seed), "--workers", str(config.workers), "--out", str(data), "--quiet"],
            out / "collect.log")
        stage(clock, "expert", f"{task} expert", finished_evaluation(out / "expert", None, evaluated) is not None,
              evaluate_command(config, ["--expert", "--task", task, *held_out], out / "expert"), out / "expert.log")
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
                stage(clock, "train", f"{name} train", trained_step(run) == training["steps"],
                      train_command(config, data, run, k, n, seed, training["batch_size"]), point / "train.log")
                stage(clock, "evaluate", f"{name} evaluate",
                      finished_evaluation(evaluation, trained_step(run), evaluated) is not None,
                      evaluate_command(config, ["--checkpoint", str(run), *held_out], evaluation), point / "eval.log")
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
