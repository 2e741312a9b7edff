"""The recorded fleet-learning run's report: its results file, its page experiments/runs/NAME.md (rendered from
that file: what the run was, its table, its plot) and its plot; and the line experiments/runs/README.md lists it by.

Behaviour cloning's points come from the results of the runs they were measured in: the
visuomotor scaling sweep (experiments/results/scaling_visuomotor.json: held-out robots,
frames counted) and the visuomotor full run (full_run_visuomotor.json: robots 0..49 on
held-out seeds, the evaluation fleet learning repeats; its frames are estimated as
demonstrations x the seed collection's mean demonstration length, which the same expert made),
and, for a run with another head or acting than bc.py's defaults, the ``bc_curve`` points of any
results file with that head and acting (push_height_branch.json's: frames counted).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from benchmarks.common import machine_facts, write_results
from core.errors import fail
from core.files import REPO
from experiments.common import doc_link
from experiments.render import RESULTS, media_link, run_page, write
from sim.fleet import SITES
from train.policies.options import PolicyOptions


def bc_points(task: str, frames_per_demo: float, setting: str, action_modes: int = 1,
              mode_actions: tuple[str, ...] = (), n_action_steps: int | None = None,
              results: Path = REPO / "experiments" / "results") -> dict[str, list[dict]]:
    """BC's recorded points on ``task`` from ``setting``'s inputs (``state`` or ``visuomotor``): ``scaling``
    (held-out robots) and ``full_run`` (the training robots on held-out seeds) for the regressing head at bc.py's
    default acting, and ``same_head``, the training robots' points for the run's own head and acting where those
    differ: the full run's and the ``bc_curve`` points of any results file; each with expert-labelled frames and
    success over the expert. ``bc_curve`` points marked ``"encoders": "pretrained"`` (experiments/bc_encoders.py)
    are ``pretrained_encoders``, apart from the curve from random encoders. Points of one curve measured with
    several training seeds on the same demonstrations are one point: their mean, with ``seeds`` counting them (a
    seed measured twice counts once, the results file sorted last)."""
    suffix = "" if setting == "state" else f"_{setting}"
    points: dict[str, list[dict]] = {"scaling": [], "full_run": [], "same_head": [], "pretrained_encoders": []}
    scaling = json.loads((results / f"scaling{suffix}.json").read_text())
    expert = scaling["experts"][task]["fleet"]["pc_success"]
    for point in scaling["points"]:
        if point["task"] == task:
            points["scaling"].append({"demos": point["demos"], "frames": point["frames"],
                                      "success": point["success"]["pc_success"] / expert})
    default_acting = PolicyOptions.n_action_steps
    run_head = (action_modes, tuple(mode_actions), n_action_steps or default_acting)
    same_head, pretrained = {}, {}  # by demonstrations: a curve's counted frames replace the full run's estimate
    for row in json.loads((results / f"full_run{suffix}.json").read_text())["results"]:
        kind = row["policy"] if isinstance(row["policy"], str) else "mlp"  # the state full run names no kind
        if row["task"] != task or kind not in ("cnn", "mlp"):
            continue
        head = (row.get("action_modes") or 1, tuple(row.get("mode_actions") or ()), default_acting)
        demos = row["training_robots"] * row["training_episodes"]
        point = {"demos": demos, "frames": round(demos * frames_per_demo), "success": row["policy_over_expert"]}
        if head[0] == 1:
            points["full_run"].append(point)
        elif head == run_head:
            same_head[demos] = point
    if run_head != (1, (), default_acting):
        measured: dict[str, dict[int, dict[int, dict]]] = {"random": {}, "pretrained": {}}  # by demos, then seed
        for path in sorted(results.glob("*.json")):
            result = json.loads(path.read_text())
            for point in result.get("bc_curve", []):
                head = (point["action_modes"], tuple(point["mode_actions"]), point["n_action_steps"])
                if (point["task"], point["inputs"], head) == (task, setting, run_head):
                    seed = point.get("seed", result.get("config", {}).get("seed", 0))  # older points name none
                    measured[point.get("encoders", "random")].setdefault(point["demos"], {})[seed] = point
        same_head.update({demos: mean_over_seeds(seeds) for demos, seeds in measured["random"].items()})
        pretrained = {demos: mean_over_seeds(seeds) for demos, seeds in measured["pretrained"].items()}
    points["same_head"] = [same_head[demos] for demos in sorted(same_head)]
    points["pretrained_encoders"] = [pretrained[demos] for demos in sorted(pretrained)]
    return points


def mean_over_seeds(by_seed: dict[int, dict]) -> dict:
    """One curve point from ``bc_curve`` points measured on the same demonstrations with different training seeds
    (by seed): their mean success over the expert, and how many seeds it averages."""
    seeds = list(by_seed.values())
    return {"demos": seeds[0]["demos"], "frames": round(sum(point["frames"] for point in seeds) / len(seeds)),
            "success": sum(point["over_expert"] for point in seeds) / len(seeds), "seeds": len(seeds)}


def bc_bracket(success: float, points: list[dict]) -> tuple[dict, dict] | None:
    """The two neighbouring measured BC ``points`` whose successes bracket ``success``; None beyond the curve's ends
    (a share is read only between measured points, never extrapolated)."""
    points = sorted(points, key=lambda point: point["frames"])
    return next(((low, high) for low, high in zip(points, points[1:]) if low["success"] <= success <= high["success"]),
                None)


def bc_frames_for(success: float, points: list[dict]) -> float | None:
    """The expert-labelled frames BC needs for ``success`` (over the expert), read off its ``points`` as a power law
    in the error (1 - success) between the two neighbouring points that bracket it (``bc_bracket``); None outside
    the curve."""
    bracket = bc_bracket(success, points)
    if bracket is None:
        return None
    low, high = bracket
    if success == high["success"]:
        return float(high["frames"])
    errors = [max(1.0 - value, 1e-3) for value in (low["success"], high["success"], success)]
    exponent = math.log(high["frames"] / low["frames"]) / math.log(errors[1] / errors[0])
    return low["frames"] * (errors[2] / errors[0]) ** exponent


def goal_curve(bc: dict[str, list[dict]]) -> list[dict]:
    """The BC points a run's goal is measured against: the run's own head and acting where recorded, else the full
    run's (the same robots and held-out seeds as the rounds' evaluation)."""
    return bc["same_head"] or bc["full_run"]


def rows(runs: dict, expert: dict, curve: list[dict]) -> list[dict]:
    """One row per gate and round: expert-labelled frames so far, evaluation, deployment accounts, and the frames
    BC needs for the same success on ``curve`` (``bc_frames``; None off the curve) with the round's share of them."""
    table = []
    for gate, run in runs.items():
        accounts = {account["round"]: account for account in run["accounts"]}
        for evaluation in run["evaluations"]:
            account = accounts.get(evaluation["round"], {})
            fleet = evaluation["fleet"]
            table.append({"gate": gate, "round": evaluation["round"], "step": evaluation["step"],
                          "labelled_so_far": account.get("labelled_so_far"), "success": fleet["pc_success"],
                          "ci95": fleet["ci95"], "over_expert": fleet["pc_success"] / expert["fleet"]["pc_success"],
                          "per_site": {site: evaluation["per_site"][site]["pc_success"] for site in SITES
                                       if site in evaluation["per_site"]},
                          "code_version": evaluation.get("code_version"),
                          "deployment": {key: account.get(key) for key in
                                         ("episodes", "success", "autonomy", "handovers", "labelled", "rohe")}})
            needed = bc_frames_for(table[-1]["over_expert"], curve)
            table[-1]["bc_frames"] = needed and round(needed)
            bracket = bc_bracket(table[-1]["over_expert"], curve)
            table[-1]["bc_bracket"] = bracket and [round(point["frames"]) for point in bracket]
            table[-1]["bc_outside"] = bool(curve) and bracket is None  # no share read beyond measured points
            table[-1]["share_of_bc"] = account.get("labelled_so_far") / needed \
                if needed and account.get("labelled_so_far") else None
            if "held_out" in evaluation and "held_out" in expert:
                held_out = evaluation["held_out"]["fleet"]
                table[-1]["held_out"] = {"success": held_out["pc_success"], "ci95": held_out["ci95"],
                                         "over_expert": held_out["pc_success"] / expert["held_out"]["fleet"]["pc_success"]}
    return table


def fresh_training(config: dict) -> str:
    """How long each round's fresh policy trains, in words: ``--round-steps`` steps, or with ``--round-epochs``
    that many passes over its data and at least ``--round-steps``; then ``pretraining_words``."""
    steps = f"{config['round_steps']} steps"
    return (f"{config['round_epochs']:g} passes over its data (at least {steps})" if config.get("round_epochs")
            else steps) + pretraining_words(config)


def pretraining_words(config: dict) -> str:
    """", from camera encoders pretrained N steps on every recorded frame" for a run with --pretrain-steps N;
    else empty."""
    return f", from camera encoders pretrained {config['pretrain_steps']} steps on every recorded frame" \
        if config.get("pretrain_steps") else ""


def head_words(config: dict) -> str:
    """The policy's head and acting, where not bc.py's defaults, in words: ``, a mixture of 2 modes over ee_dz``,
    ``, 4 actions of each chunk executed``."""
    modes = f", a mixture of {config['action_modes']} modes" + \
        (f" over {' '.join(config['mode_actions'])}" if config.get("mode_actions") else "") \
        if config.get("action_modes", 1) > 1 else ""
    return modes + (f", {config['n_action_steps']} actions of each chunk executed"
                    if config.get("n_action_steps") else "")


def handover_limit_words(config: dict) -> str:
    """", at most H an episode" for a run with --max-handovers H, ", asked for after T steps without progress" for
    one with --stall-steps T; else empty."""
    return (f", at most {config['max_handovers']} an episode" if config.get("max_handovers") else "") + \
        (f", asked for after {config['stall_steps']} steps without progress" if config.get("stall_steps") else "")


def code_words(table: list[dict], machine: dict) -> str:
    """The code the rows were evaluated with, in words: one version, or the first and last of several (each row's
    own is in the results); ``machine``'s where the rows do not say."""
    versions = list(dict.fromkeys(row["code_version"] for row in table if row.get("code_version")))
    if len(versions) > 1:
        return f"code {versions[0]} to {versions[-1]} (each round's in the results' rows)"
    return f"code {versions[0] if versions else machine['code_version']}"


def markdown(config: dict, table: list[dict], expert: dict, command: str, machine: dict) -> str:
    lines = [f"Measured on {machine['cores']} cores, {code_words(table, machine)}: "
             f"{config['policy']} on {config['inputs']}"
             + (f" ({' + '.join(config['cameras'])} at {config['image_size']} px)" if config['cameras'] else "")
             + head_words(config) + ", "
             f"seed {config['seed_robots']} robots x {config['seed_episodes']} demonstrations; each round deploys on "
             f"{config['fleet_robots']} robots x {config['deploy_episodes']} episodes"
             + (" (continuously: a robot starts its next episode as soon as one ends)" if config.get("continuous")
                else "") + f" with {config['operators']} "
             f"operators, {config['help_steps']} expert steps, hand-overs of up to {config['segment_steps']} steps"
             + handover_limit_words(config)
             + (f", the random gate asking on {config['random_rate']:.0%} of the steps" if "random" in config['gates']
                else "") + ", "
             + (f"then trains a fresh policy for {fresh_training(config)}" if config.get("retrain") == "fresh"
                else f"then trains {config['round_steps']} steps")
             + (" (on the policy's own successes too)" if config.get("own_successes") else "")
             + f". Evaluated on robots 0..{config['eval_robots'] - 1} x "
             f"{config['eval_episodes']} held-out episodes (the expert: {expert['fleet']['pc_success']:.1f}%)"
             + (f", and on held-out robots {config['fleet_robots']}..{config['fleet_robots'] + config['held_out_robots'] - 1}"
                f" x {config['held_out_episodes']} that no seed or round has seen (the expert: "
                f"{expert['held_out']['fleet']['pc_success']:.1f}%)" if "held_out" in expert else "") + ".",
             "", "```bash", command, "```", "",
             "| gate | round | steps | expert-labelled frames | success [95%] | over expert | office | warehouse | "
             "factory | held-out robots [95%] | BC needs (share) | deployment success | autonomy | hand-overs | ROHE |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        deployment = row["deployment"]
        shown = (f"{deployment['success']:.0%} | {deployment['autonomy']:.0%} | {deployment['handovers']} | "
                 f"{deployment['rohe']:.2f}" if deployment.get("episodes") else "- | - | - | -")
        sites = " | ".join(f"{row['per_site'].get(site, float('nan')):.0f}%" for site in SITES)
        held_out = row.get("held_out")
        held_out = f"{held_out['success']:.1f}% [{held_out['ci95'][0]:.0f}, {held_out['ci95'][1]:.0f}]" if held_out \
            else "-"
        needed = (f"{row['bc_frames']:,} ({row['share_of_bc']:.0%}; between BC's {row['bc_bracket'][0]:,} and "
                  f"{row['bc_bracket'][1]:,})" if row.get("share_of_bc")
                  else "- (outside BC's measured points)" if row.get("bc_outside") else "-")
        lines.append(f"| {row['gate']} | {row['round']} | {row['step']} | {row['labelled_so_far']} | "
                     f"{row['success']:.1f}% [{row['ci95'][0]:.0f}, {row['ci95'][1]:.0f}] | {row['over_expert']:.2f} | "
                     f"{sites} | {held_out} | {needed} | {shown} |")
    return "\n".join(lines)


def plot(table: list[dict], bc: dict[str, list[dict]], setting: str, head: str, path: Path) -> None:
    """Success over the expert against expert-labelled frames: each gate's rounds beside BC's points (``head``,
    in words, names the head and acting of ``bc["same_head"]``: the run's own)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 6), layout="constrained")
    for name, marker, label in (("scaling", "s", "BC, scaling sweep (held-out robots)"),
                                ("full_run", "D", f"BC, the {setting} full run (robots 0-49)"),
                                ("same_head", "*", f"BC{head} (robots 0-49)"),
                                ("pretrained_encoders", "P", f"BC{head}, encoders pretrained on its demonstrations")):
        points = sorted(bc.get(name, []), key=lambda p: p["frames"])
        if not points:
            continue
        if any(point.get("seeds", 1) > 1 for point in points):
            label += "; a point of several training seeds is their mean"
        axes.plot([p["frames"] for p in points], [p["success"] for p in points], marker=marker, linestyle=":",
                  label=label)
    for gate in dict.fromkeys(row["gate"] for row in table):
        points = [row for row in table if row["gate"] == gate]
        line, = axes.plot([row["labelled_so_far"] for row in points], [row["over_expert"] for row in points],
                          marker="o", label=f"fleet learning, gate {gate}: robots 0-49 (rounds 0-{points[-1]['round']})")
        held_out = [row for row in points if "held_out" in row]
        if held_out:
            axes.plot([row["labelled_so_far"] for row in held_out], [row["held_out"]["over_expert"] for row in held_out],
                      marker="o", markerfacecolor="none", linestyle="--", color=line.get_color(),
                      label=f"fleet learning, gate {gate}: held-out robots")
    axes.axhline(0.95, color="grey", linewidth=0.8, linestyle="--")
    axes.set_xscale("log")
    axes.set_xlabel("expert-labelled frames (seed demonstrations included)")
    axes.set_ylabel("success / expert's")
    axes.set_ylim(0, 1.02)
    entries = len(axes.get_legend_handles_labels()[1])
    # Below the axes: inside, it hid the low rounds.
    figure.legend(fontsize=8, loc="outside lower center", ncol=1 if entries <= 6 else 2)
    axes.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


SEED_FIELDS = ("task", "seed", "seed_robots", "seed_episodes", "seed_steps")  # what a results name does not spell


def check_results_are_its_own(config: dict, name: str, results_dir: Path) -> None:
    """Refuse, with one line, a run whose results (``results_dir/name.json``, its page and plot) would
    replace those of a run from another seed: the name spells the deployment and the head, not the seed."""
    path = results_dir / f"{name}.json"
    if not path.exists():
        return
    recorded = json.loads(path.read_text()).get("config", {})
    differ = [key for key in SEED_FIELDS if key in recorded and recorded[key] != config[key]]
    if differ:
        theirs = ", ".join(f"--{key.replace('_', '-')} {recorded[key]}" for key in differ)
        fail(f"{path} holds the results of a run from another seed ({theirs}); give this run its own "
             "--results-name")


def publish(config, command: str, expert: dict, runs: dict, seconds: dict, machine: dict | None = None) -> dict:
    """Write the results file, the run's page (in the folder ``config.docs``) and the plot; the results.
    ``machine``: where the run was measured (default: here and now)."""
    seed_frames = next(iter(runs.values()))["accounts"][0]["labelled_so_far"]
    inputs = "visuomotor" if config.cameras else "state"
    bc = bc_points(config.task, seed_frames / (config.seed_robots * config.seed_episodes), inputs,
                   config.action_modes, config.mode_actions, config.n_action_steps)
    table = rows(runs, expert, goal_curve(bc))
    config_dict = asdict(config)
    media = Path(config.media) / f"{config.name}_{config.task}.png"
    machine = machine or machine_facts()
    result = {"experiment": config.name, "machine": machine, "config": config_dict, "command": command,
              "expert": expert["fleet"],
              **({"expert_held_out": expert["held_out"]["fleet"]} if "held_out" in expert else {}),
              "rows": table, "rohe_over_random": rohe_over_random(table), "bc": bc, "runs": runs, "seconds": seconds,
              "plot": str(media)}
    write_results(config.name, result, Path(config.results_dir))
    plot(table, bc, inputs, head_words(config_dict), media)
    write(config.name, result, Path(config.docs) / f"{config.name}.md")
    best = max(table, key=lambda row: row["over_expert"])
    print(f"best: gate {best['gate']} round {best['round']}: {best['over_expert']:.2f} of the expert from "
          f"{best['labelled_so_far']} expert-labelled frames")
    return result


def title(config: dict) -> str:
    """The title of a run's page: its setting, task, and what sets its loop apart."""
    fresh = ", a fresh policy each round" + (f" for {config['round_epochs']:g} passes over its data"
                                             if config.get("round_epochs") else "") + pretraining_words(config)
    return (f"The recorded run ({config['setting']}, {config['task']}"
            + (f", {config['deploy_episodes']} episodes a robot each round, continuously" if config.get("continuous")
               else "") + (f", hand-overs of up to {config['segment_steps']} steps" if config.get("hand_overs") else "")
            + handover_limit_words(config) + (fresh if config.get("retrain") == "fresh" else "")
            + (", learning from its own successes" if config.get("own_successes") else "") + head_words(config) + ")")


def recorded_expert(result: dict) -> dict:
    """The expert's evaluation as ``publish`` takes it. Results written before the held-out expert was kept give
    it back from a row: held-out success over the expert's is the ratio recorded beside the success."""
    expert = {"fleet": result["expert"]}
    held_out = result.get("expert_held_out")
    if held_out is None:
        row = next((row for row in result["rows"] if "held_out" in row), None)
        held_out = row and {"pc_success": row["held_out"]["success"] / row["held_out"]["over_expert"]}
    if held_out:
        expert["held_out"] = {"fleet": held_out}
    return expert


def section_text(result: dict) -> str:
    """A run's table, ROHE over the random gate's, and its plot, as its page shows them."""
    ratios = ", ".join(f"{gate} {ratio:.2f}" for gate, ratio in result["rohe_over_random"].items() if gate != "random")
    over_random = f"\n\nROHE over all rounds, over the random gate's: {ratios}." if ratios else ""
    return (markdown(result["config"], result["rows"], recorded_expert(result), result["command"], result["machine"])
            + over_random + f"\n\n![success against expert frames]({media_link(result['plot'])})")


def page_text(result: dict) -> str:
    """A run's page: its title, a paragraph on what the run was and where its figures come from, and
    ``section_text``."""
    config, name = result["config"], result["experiment"]
    rounds, gates = sorted({row["round"] for row in result["rows"]}), config["gates"]
    page, results = run_page(name), f"{RESULTS}/{name}.json"
    about = (f"The fleet-learning run `{name}`: {config['task']} from {config['inputs']}, "
             + (f"the {gates[0]} gate" if len(gates) == 1 else f"the gates {', '.join(gates)}")
             + f", rounds {rounds[0]}..{rounds[-1]} evaluated. Its command and configuration are below; every "
             f"figure on this page is rendered from its results file, [{results}]({doc_link(results, page)}), by "
             "`python -m experiments.render` (the run writes it when it finishes). [Every recorded run](README.md); "
             f"the loop and its options: [docs/fleet_learning.md]({doc_link('docs/fleet_learning.md', page)}).")
    return f"# {title(config)}\n\n{about}\n\n{section_text(result)}"


def index_text(results: dict[str, dict]) -> str:
    """The list of recorded runs (``results`` by name): one line each with its task, setting and best round."""
    lines = ["| run | task | setting | best success over the expert (gate, round, expert-labelled frames) |",
             "|---|---|---|---|"]
    for name, result in results.items():
        config = result["config"]
        best = max(result["rows"], key=lambda row: row["over_expert"])
        lines.append(f"| [{name}]({name}.md) | {config['task']} | {config['setting']} | "
                     f"{best['over_expert']:.3f} ({best['gate']}, {best['round']}, {best['labelled_so_far']:,}) |")
    return "\n".join(lines)


def rohe_over_random(table: list[dict]) -> dict[str, float]:
    """Each gate's deployment ROHE over all its rounds, over the random gate's (when both ran)."""
    totals = {}
    for row in table:
        deployment = row["deployment"]
        if deployment.get("episodes"):
            successes, labelled = totals.get(row["gate"], (0.0, 0))
            totals[row["gate"]] = (successes + deployment["success"] * deployment["episodes"],
                                   labelled + deployment["labelled"])
    rohe = {gate: 1000 * successes / labelled for gate, (successes, labelled) in totals.items() if labelled}
    return {gate: value / rohe["random"] for gate, value in rohe.items()} if rohe.get("random") else {}
