"""Return on human effort at several budgets: every gate deploys one policy for one round at each help cap, no
retraining, and each gate's ROHE is set beside the random gate's (issue 44's goal: the best gate >= 2x).

    .venv/bin/python -m experiments.fleet_rohe     # after experiments.fleet_learning --setting budget
    .venv/bin/python -m experiments.fleet_rohe --continuous --uncertainty 0.6 --deploy-episodes 6 \
        --caps 0 900 1800 4500 9000 --policies runs/fleet_learning_budget/seed_policy \
        runs/rohe_strength/policy_18x10 runs/rohe_strength/policy_27x10 runs/rohe_strength/policy_50x10 \
        --out runs/fleet_rohe_strength     # experiments/runs/fleet_rohe*.md's tables

The policy is the seed policy of an ``experiments.fleet_learning`` run (``--source``, by default
the ``budget`` setting's: the state MLP from 9 robots x 10 demonstrations), deployed on that run's
fleet and round-1 episode seeds, so each cell is that run's first round at another cap.
``--policies`` deploys other checkpoints of the same task on the same fleet and seeds instead, each
in every cell: how much a gate saves depends on how often the policy fails alone. Per policy, cap
and gate, ``deploy_round`` (train/fleet/deploy.py) runs the round on one dask cluster shared by
all cells, and the accounts come from its store (train/fleet/accounting.py): deployment success,
expert-labelled frames, hand-overs, ROHE (successes per 1,000 expert-labelled frames). The cap
``0`` row is the policy alone. The random gate at ``--random-rate 1`` is Fleet-DAgger's random
allocation: a free operator takes a robot at random whenever budget is left. With
``--continuous`` robots start their next episode at once, so the random gate's help is spread
over the whole fleet as a deployed one's would be, not over the robots still failing late in
a wave. ``--seed-round`` deploys another round's episode seeds: choose thresholds there, then
measure on round 1. Each ratio comes with a 95% interval from a paired bootstrap over robots.

Every cell's store is kept in ``--out``, as ``POLICY/cap_C/GATE`` (POLICY: the checkpoint's directory
name); a rerun deploys only the cells not finished. The table goes
into ``--docs`` (default: the run's page, experiments/runs/NAME.md), the plot into ``--media``, the results into
``--results-dir/fleet_rohe.json``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.common import machine_facts, write_results
from collect.config import CollectConfig
from core.cluster import dask_client
from core.files import repo_relative
from core.options import check_options, parse_config
from dataset import FleetStore
from dataset.manifest import read_manifest
from experiments.common import recorded_config
from experiments.render import media_link, write
from train.checkpoint import latest_checkpoint
from train.fleet.accounting import round_account
from train.fleet.deploy import Help, deploy_round
from train.fleet.gates import GATES, GateOptions


@dataclass
class FleetRoheConfig(GateOptions):
    source: str = field(default="runs/fleet_learning_budget", metadata={
        "help": "an experiments.fleet_learning run: its seed policy deploys, on its seed collection's fleet"})
    caps: tuple[int, ...] = field(default=(0, 300, 600, 1500, 3000), metadata={
        "help": "expert steps per round (0: the policy alone)"})
    gates: tuple[str, ...] = field(default=tuple(GATES), metadata={"help": "gates, each at every cap"})
    policies: tuple[str, ...] = field(default=(), metadata={
        "help": "checkpoints (or runs: their latest) of the source's task to deploy, each in every cell (default: "
                "the source's seed policy)"})
    operators: int = field(default=5, metadata={"help": "robots helped at most at once"})
    segment_steps: int = field(default=15, metadata={"help": "expert steps per hand-over at most"})
    min_segment_steps: int | None = field(default=None, metadata={
        "help": "a hand-over ends once the gate no longer asks after this many steps (default: --segment-steps)"})
    max_handovers: int | None = field(default=None, metadata={
        "help": "hand-overs an episode gets at most, under every gate (default: no limit)"})
    random_rate: float = field(default=1.0, metadata={
        "help": "random gate: the share of steps a robot asks (1: operators never idle while the budget lasts)"})
    fleet_robots: int = field(default=50, metadata={"help": "robots deployed"})
    deploy_episodes: int = field(default=2, metadata={"help": "episodes per robot"})
    continuous: bool = field(default=False, metadata={
        "help": "robots start their next episode at once (default: in waves, as the source run deployed)"})
    seed_round: int = field(default=1, metadata={
        "help": "the round whose episode seeds deploy (1: the source run's first round; choose thresholds on "
                "another, then measure on 1)"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers"})
    out: str = field(default="runs/fleet_rohe", metadata={"help": "the cells' stores"})
    docs: str = field(default="", metadata={"help": "markdown file for the table (default: the run's page)"})
    media: str = field(default="docs/media", metadata={"help": "where the plot goes"})
    results_dir: str = field(default="experiments/results", metadata={"help": "where fleet_rohe.json goes"})

    def __post_init__(self):
        GateOptions.__post_init__(self)
        if unknown := [gate for gate in self.gates if gate not in GATES]:
            raise ValueError(f"--gates must be among {', '.join(GATES)}, got {unknown[0]!r}")
        check_options(self, ("operators", "segment_steps", "fleet_robots", "deploy_episodes", "workers",
                             "seed_round"), lambda value: value >= 1, "must be at least 1")
        check_options(self, ("caps",), lambda caps: all(cap >= 0 for cap in caps), "must not be negative")
        check_options(self, ("max_handovers",), lambda value: value is None or value >= 1, "must be at least 1")
        self.policies = self.policies or (str(Path(self.source) / "seed_policy"),)
        if missing := [policy for policy in self.policies if not Path(policy).exists()]:
            raise ValueError(f"--policies: {missing[0]} does not exist")
        if len({Path(policy).name for policy in self.policies}) < len(self.policies):
            raise ValueError("--policies must have distinct directory names (they name the cells' stores)")


def deploy_cell(config: FleetRoheConfig, scheduler: str, policy: str, cap: int, gate: str) -> dict:
    """One round of ``policy`` at ``cap`` expert steps under ``gate``, on the source's fleet; its account."""
    source = Path(config.source)
    seed = read_manifest(source / "seed")
    data = seed["data_config"]
    name = Path(policy).name
    store = Path(config.out) / name / f"cap_{cap}" / gate
    collection = CollectConfig(robots=config.fleet_robots, episodes=config.deploy_episodes,
                               task=seed["task"]["reference"], out=str(store), seed=data["seed"],
                               cameras=tuple(data["cameras"]), image_size=data["image_size"], keep_failures=True,
                               workers=config.workers, scheduler=scheduler, quiet=True)
    checkpoint = latest_checkpoint(policy)
    help = Help(gate, config.gate_options(), config.segment_steps, config.operators, config.continuous,
                config.min_segment_steps, config.max_handovers)
    deploy_round(collection, str(checkpoint), config.seed_round, help, cap,
                 {"source": "fleet_rohe", "policy": repo_relative(checkpoint), "fleet_of": repo_relative(source / "seed")})
    account = round_account(FleetStore.open(store))
    print(f"{name} cap {cap:5d} {gate:12s} success {account['success']:6.1%}  expert-labelled {account['labelled']:5d}  "
          f"hand-overs {account['handovers']:3d}  ROHE {account['rohe'] or 0:7.2f}", flush=True)
    return {"policy": repo_relative(checkpoint), "policy_name": name, "cap": cap, "gate": gate, **{key: account[key] for key in
                                          ("episodes", "successes", "success", "labelled", "handovers", "autonomy",
                                           "rohe")}, "sites": account["sites"],
            "robots": {robot: [totals["successes"], totals["labelled"]] for robot, totals in account["robots"].items()}}


def over_random(cells: list[dict]) -> None:
    """Each cell's ROHE over the random gate's for the same policy at the same cap, and its 95% interval, in place
    (``rohe_over_random``, ``rohe_over_random_95``)."""
    random = {(cell["policy_name"], cell["cap"]): cell for cell in cells if cell["gate"] == "random"}
    for cell in cells:
        baseline = random.get((cell["policy_name"], cell["cap"]))
        measured = cell["rohe"] is not None and baseline is not None and bool(baseline["rohe"])
        cell["rohe_over_random"] = cell["rohe"] / baseline["rohe"] if measured else None
        cell["rohe_over_random_95"] = ratio_interval(cell, baseline) if measured and cell is not baseline else None


def ratio_interval(cell: dict, baseline: dict, draws: int = 4000) -> list[float]:
    """A 95% interval of ``cell``'s ROHE over ``baseline``'s: a paired bootstrap over robots (both cells deploy
    the same robots on the same episode seeds, so a robot is resampled with its episodes in both). Robots of one
    operator share its help, so the interval is somewhat too narrow."""
    robots = sorted(cell["robots"])
    counts = [np.array([c["robots"][robot] for robot in robots], dtype=float) for c in (cell, baseline)]
    samples = np.random.default_rng(0).integers(0, len(robots), size=(draws, len(robots)))
    with np.errstate(divide="ignore", invalid="ignore"):
        gate, random = (c[samples].sum(axis=1) for c in counts)  # [draws, 2]: successes, labelled frames
        ratios = (gate[:, 0] / gate[:, 1]) / (random[:, 0] / random[:, 1])
    return [float(bound) for bound in np.percentile(ratios[np.isfinite(ratios)], [2.5, 97.5])]


def section_text(result: dict) -> str:
    """The docs section of a results file: one table per policy (a row per cap, a column per gate) and, for several
    policies, one that sets the gates' ROHE at the largest cap beside how well each policy does alone; the plot."""
    config, alone, cells, command = (result[key] for key in ("config", "alone", "cells", "command"))
    gates, machine, limit = list(config["gates"]), result["machine"], config.get("max_handovers")
    lines = [f"Measured on {machine['cores']} cores, code {machine['code_version']}: each policy "
             f"deploys on the fleet of `{config['source']}`, {config['fleet_robots']} robots x {config['deploy_episodes']} "
             f"episodes. Each cell is the same round (episode seeds of round {config['seed_round']}, robots deployed "
             f"{'continuously' if config['continuous'] else 'in waves'}) with {config['operators']} operators, hand-overs "
             f"of up to {config['segment_steps']} steps{' and ' + limit_words(limit) if limit else ''}, "
             "the random gate asking on "
             f"{config['random_rate']:.0%} of the "
             f"steps, and the gates' thresholds `{thresholds(recorded_config(GateOptions, config))}`: deployment "
             "success, expert-labelled frames, "
             "ROHE (successes per 1,000 of them), and ROHE over the random gate's at the same cap.",
             "", "```bash", command, "```"]
    for name, policy_alone in alone.items():
        lines += ["", f"`{policy_alone['policy']}` alone: {policy_alone['success']:.0%} of its episodes.", "",
                  "| expert steps a round | " + " | ".join(gates) + " |", "|---|" + "---|" * len(gates)]
        mine = [cell for cell in cells if cell["policy_name"] == name]
        for cap in sorted({cell["cap"] for cell in mine}):
            row = {cell["gate"]: cell for cell in mine if cell["cap"] == cap}
            lines.append(f"| {cap} | " + " | ".join(_cell(row.get(gate)) for gate in gates) + " |")
    if len(alone) > 1:
        largest = max(config["caps"])
        lines += ["", f"By how well the policy does alone, at {largest} expert steps a round:", "",
                  "| policy | alone | " + " | ".join(gates) + " |", "|---|---|" + "---|" * len(gates)]
        for name, policy_alone in alone.items():
            row = {cell["gate"]: cell for cell in cells if cell["policy_name"] == name and cell["cap"] == largest}
            lines.append(f"| {name} | {policy_alone['success']:.0%} | " +
                         " | ".join(_cell(row.get(gate)) for gate in gates) + " |")
    return "\n".join(lines) + f"\n\n![ROHE against the budget]({media_link(result['plot'])})"


def limit_words(max_handovers: int) -> str:
    """The hand-over limit per episode in words: "at most 2 hand-overs an episode"."""
    return f"at most {max_handovers} hand-over{'s' if max_handovers > 1 else ''} an episode"


def results_name(config: FleetRoheConfig) -> str:
    """The results' name (results file, docs section, plot): ``fleet_rohe``, and the hand-over limit if any, so
    that a run with a limit keeps the run without one."""
    return f"fleet_rohe_{config.max_handovers}_handovers" if config.max_handovers else "fleet_rohe"


def thresholds(options: GateOptions) -> str:
    """The gates' thresholds (all but the random gate's rate) as command-line options."""
    return " ".join(f"--{name.replace('_', '-')} {getattr(options, name)}" for name in
                    ("stall_steps", "min_progress", "regress", "uncertainty"))


def _cell(cell: dict | None) -> str:
    """A table cell: success, expert-labelled frames, ROHE and its ratio to the random gate's."""
    if cell is None:
        return "-"
    if not cell["labelled"]:
        return f"{cell['success']:.0%}, no help asked"
    ratio = f", **{cell['rohe_over_random']:.2f}x** [{cell['rohe_over_random_95'][0]:.2f}, " \
        f"{cell['rohe_over_random_95'][1]:.2f}]" if cell["gate"] != "random" and cell["rohe_over_random"] \
        is not None else ""
    return f"{cell['success']:.0%}, {cell['labelled']}, {cell['rohe']:.0f}{ratio}"


def plot(alone: dict[str, dict], cells: list[dict], path: Path) -> None:
    """Left: each gate's ROHE over random's against the cap, a line style per policy; right: at the largest cap,
    against how well the policy does alone. Both with their 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    figure, (by_cap, by_policy) = plt.subplots(1, 2, figsize=(11, 4))
    gates = [gate for gate in dict.fromkeys(cell["gate"] for cell in cells) if gate != "random"]
    colours = {gate: f"C{index + 1}" for index, gate in enumerate(gates)}
    largest = max(cell["cap"] for cell in cells)
    nudge = 0.012 * largest  # side by side, so the intervals do not hide each other
    styles = dict(zip(alone, ("-", "--", ":", "-.") * len(alone)))
    for index, gate in enumerate(gates):
        for name, style in styles.items():
            mine = sorted((c for c in cells if c["gate"] == gate and c["policy_name"] == name), key=lambda c: c["cap"])
            _errorbar(by_cap, [c["cap"] + nudge * (index - len(gates) / 2) for c in mine], mine, colours[gate],
                      style, None)
        at_largest = [next(c for c in cells if c["gate"] == gate and c["policy_name"] == name and c["cap"] == largest)
                      for name in alone]
        _errorbar(by_policy, [alone[name]["success"] for name in alone], at_largest, colours[gate], "-", gate)
    by_cap.set_xlabel("expert steps allowed a round (the cap)")
    by_policy.set_xlabel(f"the policy's deployment success alone (cap {largest})")
    by_cap.legend([Line2D([], [], color="black", linestyle=style) for style in styles.values()], list(styles),
                  fontsize=7, title="policy (colours: gates, right)", title_fontsize=7)
    by_policy.legend(fontsize=7)
    for axes in (by_cap, by_policy):
        axes.axhline(2.0, color="grey", linewidth=0.8, linestyle="--")
        axes.set_ylabel("ROHE / the random gate's")
        axes.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _errorbar(axes, x: list[float], cells: list[dict], colour: str, style: str, label: str | None) -> None:
    """``cells``' ROHE over random's at ``x``, with their 95% intervals."""
    ratios = np.array([c["rohe_over_random"] or np.nan for c in cells])
    bounds = np.array([c["rohe_over_random_95"] or [np.nan, np.nan] for c in cells]).T
    axes.errorbar(x, ratios, yerr=np.abs(bounds - ratios), color=colour, linestyle=style, marker="o", capsize=3,
                  label=label)


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(FleetRoheConfig, __doc__, argv)
    command = " ".join(["python -m experiments.fleet_rohe", *(argv if argv is not None else sys.argv[1:])])
    with dask_client(None, config.workers, preload=("train.fleet.deploy",)) as client:
        scheduler = client.scheduler.address
        alone = {Path(policy).name: deploy_cell(config, scheduler, policy, 0, config.gates[0])
                 for policy in config.policies}
        cells = [deploy_cell(config, scheduler, policy, cap, gate) for policy in config.policies
                 for cap in config.caps if cap for gate in config.gates]
    over_random(cells)
    name = results_name(config)
    media = Path(config.media) / f"{name}.png"
    plot(alone, cells, media)
    result = {"experiment": "fleet_rohe", "machine": machine_facts(), "config": asdict(config), "command": command,
              "alone": alone, "cells": cells, "plot": str(media)}
    write_results(name, result, Path(config.results_dir))
    heading = "## ROHE at several budgets" + (f", {limit_words(config.max_handovers)}" if config.max_handovers else "")
    write(name, result, config.docs, heading)
    return result


if __name__ == "__main__":
    main()
