"""From experiments.scaling's points to its results: the power-law fits, the plain statement of what
reaches 90% of the expert, the plots, the JSON and the docs section (``publish`` does it all)."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np

from benchmarks.common import machine_facts, write_results
from core.files import repo_relative
from experiments.common import doc_link, recorded_config
from experiments.full_run import percent
from experiments.render import write
from experiments.scaling_config import ScalingConfig
from sim.fleet import SITES

TARGET = 0.9  # success over the expert's that "reaches the expert"
SWEEPS = ("robots", "episodes")


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
    return Path(config.media).resolve() / f"{config.name}_{sweep}.png"


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


def section_text(result: dict) -> str:
    """The docs section of a results file: every point, the fits, what reaches the target, and the plots."""
    facts, config = result["machine"], asdict(recorded_config(ScalingConfig, result["config"]))  # options since
    first = result["held_out_robots"][0]
    lines = [f"Measured {facts['date']} on {facts['cores']} cores ({facts['device']}), code {facts['code_version']}: "
             f"{config['policy']} {list(config['hidden'])} on {config['inputs']} inputs"
             + (f" ({' + '.join(config['cameras'])} cameras at {config['image_size']} px)" if config['cameras'] else "")
             + f", {config['ranks']} DDP ranks x batch {config['batch_size']} (or a "
             "point's frames per rank, if fewer), "
             f"steps = {config['steps_per_demo']:g} per demonstration within [{config['min_steps']}, {config['max_steps']}], "
             f"training seeds {', '.join(map(str, config['seeds']))}; evaluated on held-out robots {first}.."
             f"{first + config['eval_robots'] - 1} x {config['eval_episodes']} held-out episodes, every point and the "
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
    lines += [f"![success against {sweep}]({doc_link(result['plots'][sweep], config['docs'])})" for sweep in SWEEPS]
    return "\n".join(lines)


def publish(config: ScalingConfig, command: str, points: list[dict], experts: dict, seconds: dict) -> dict:
    """Fits, plots, scaling.json and the doc's section, from every point so far."""
    fits = {task: task_fits(config, task, points) for task in experts}
    plots = {}
    for sweep in SWEEPS:
        plot(config, sweep, points, experts, fits, plot_path(config, sweep))
        plots[sweep] = repo_relative(plot_path(config, sweep))
    result = {"experiment": config.name, "machine": machine_facts(), "config": asdict(config), "command": command,
              "held_out_robots": list(range(config.fleet[0], config.fleet[0] + config.eval_robots)),
              "experts": {task: {key: info[key] for key in ("fleet", "per_site")} for task, info in experts.items()},
              "points": points, "fits": fits,
              "statements": [statement(config, task, fits[task], points) for task in experts],
              "plots": plots, "seconds": seconds}
    write_results(config.name, result, Path(config.results_dir))
    heading = "## Data scaling" if config.setting == "state" else f"### Data scaling, {config.setting}"
    write(config.name, result, config.docs, heading)
    return result


def duration_text(result: dict) -> str:
    """How long the recorded sweep took, all its stages and tasks together: ``64 minutes on 2 cores (cpu)``."""
    seconds = sum(sum(stages.values()) for stages in result["seconds"].values())
    facts = result["machine"]
    return f"{seconds / 60:.0f} minutes on {facts['cores']} cores ({facts['device']})"
