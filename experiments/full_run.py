"""The recorded full run: collect, train and evaluate each task, the BC policy against the scripted expert.

    .venv/bin/python -m experiments.full_run                    # the recorded run (see docs/evaluation.md)
    .venv/bin/python -m experiments.full_run --tasks reach --robots 3 --episodes 4 --steps 50 \\
        --eval-robots 3 --eval-episodes 2 --out /tmp/full --docs /tmp/full/evaluation.md --results-dir /tmp/full

For each task, as a user would run it (each stage a subprocess, its output in a log):

1. ``collect --robots R --episodes E --task T`` (state observations, the scripted expert);
2. ``torchrun --standalone --nproc_per_node=RANKS train/bc.py --max-steps S`` (DDP behaviour cloning);
3. ``evaluate --compare --robots N --episodes K``: the policy and the expert on the same
   robots and the same held-out seeds.

The goal (issue: evaluation) is policy success >= 90% of the expert's on every task and
>= 95% on reach. Per-task data and steps are given in the order of ``--tasks`` (one value
serves every task). Writes ``full_run.json`` to ``--results-dir`` and the table, with the
command that made it, into ``--docs``. Every stage resumes: rerunning after a crash
skips the finished work (collect and train carry on; evaluation is redone).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.common import machine_facts, write_results
from experiments.common import REPO, run_step, write_section
from sim.cli import parse_config
from sim.fleet import SITES

GOALS = {"reach": 0.95}  # policy success / expert success; every other task: DEFAULT_GOAL
DEFAULT_GOAL = 0.90


@dataclass
class FullRunConfig:
    tasks: tuple[str, ...] = field(default=("reach", "push", "pick_place"), metadata={"help": "tasks, in order"})
    robots: int = field(default=50, metadata={"help": "robots collected for training (fleet seed --seed)"})
    # Sized from a probe (docs/evaluation.md): push is the data-hungry one.
    episodes: tuple[int, ...] = field(default=(20, 100, 40), metadata={"help": "training episodes per robot, per task"})
    steps: tuple[int, ...] = field(default=(2000, 20000, 10000), metadata={"help": "training steps, per task"})
    hidden: tuple[int, ...] = field(default=(512, 512, 512), metadata={"help": "MLP hidden widths"})
    batch_size: int = field(default=256, metadata={"help": "windows per rank per step"})
    val_fraction: float = field(default=0.05, metadata={"help": "training episodes held out for the validation loss"})
    ranks: int = field(default=2, metadata={"help": "DDP ranks (torchrun processes)"})
    eval_robots: int = field(default=50, metadata={"help": "robots evaluated (the training fleet's first N)"})
    eval_episodes: int = field(default=10, metadata={"help": "held-out episodes per evaluated robot"})
    seed: int = field(default=0, metadata={"help": "fleet seed"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers for collect and evaluate"})
    out: str = field(default="runs/full_run", metadata={"help": "directory for data, runs, evaluations and logs"})
    docs: str = field(default=str(REPO / "docs" / "evaluation.md"), metadata={"help": "markdown file for the table"})
    results_dir: str = field(default=str(REPO / "experiments" / "results"),
                             metadata={"help": "where full_run.json is written"})

    def __post_init__(self):
        for name in ("episodes", "steps"):
            values = getattr(self, name)
            if len(values) not in (1, len(self.tasks)):
                raise ValueError(f"--{name} takes one value or one per task ({len(self.tasks)}), got {len(values)}")
        for name in ("robots", "eval_robots", "eval_episodes", "ranks", "batch_size", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")

    def per_task(self, name: str, task_index: int) -> int:
        values = getattr(self, name)
        return values[task_index] if len(values) > 1 else values[0]


def task_commands(config: FullRunConfig, task: str, index: int, out: Path) -> dict[str, list[str]]:
    """The three stages of one task, as command lines."""
    python = sys.executable
    return {
        "collect": [python, "-m", "collect.cli", "--task", task, "--robots", str(config.robots),
                    "--episodes", str(config.per_task("episodes", index)), "--seed", str(config.seed),
                    "--workers", str(config.workers), "--out", str(out / "data"), "--quiet"],
        "train": [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={config.ranks}",
                  str(REPO / "train" / "bc.py"), "--data", str(out / "data"), "--out", str(out / "run"),
                  "--max-steps", str(config.per_task("steps", index)), "--batch-size", str(config.batch_size),
                  "--val-fraction", str(config.val_fraction), "--hidden", *map(str, config.hidden), "--seed", str(config.seed)],
        "evaluate": [python, "-m", "eval.cli", "--checkpoint", str(out / "run"), "--robots", str(config.eval_robots),
                     "--episodes", str(config.eval_episodes), "--compare", "--workers", str(config.workers),
                     "--out", str(out / "eval"), "--overwrite", "--quiet"],
    }


def task_result(config: FullRunConfig, task: str, index: int, info: dict, seconds: dict) -> dict:
    policy, expert = info["fleet"], info["expert"]["fleet"]
    ratio = policy["pc_success"] / expert["pc_success"] if expert["pc_success"] else None
    goal = GOALS.get(task, DEFAULT_GOAL)
    return {
        "task": task, "training_robots": config.robots, "training_episodes": config.per_task("episodes", index),
        "steps": info["checkpoint"]["step"], "policy": {k: policy[k] for k in ("n_episodes", "pc_success", "ci95")},
        "expert": {k: expert[k] for k in ("n_episodes", "pc_success", "ci95")},
        "policy_per_site": {site: info["per_site"][site]["pc_success"] for site in SITES if site in info["per_site"]},
        "policy_over_expert": ratio, "goal": goal, "met": ratio is not None and ratio >= goal,
        "crashed_episodes": policy["n_errors"], "seconds": {k: round(v) for k, v in seconds.items()},
    }


def table(results: list[dict], facts: dict, command: str, config: FullRunConfig) -> str:
    lines = [f"Measured {facts['date']} on {facts['cores']} cores ({facts['device']}), code {facts['code_version']}: "
             f"state observations, MLP {list(config.hidden)}, {config.ranks} DDP ranks x batch {config.batch_size}; "
             f"{config.eval_robots} robots x {config.eval_episodes} held-out episodes per task, policy and expert "
             "on the same seeds.", "", "```bash", command, "```", "",
             "| task | training data | steps | policy | expert | policy/expert | goal | met | "
             + " | ".join(SITES) + " | collect / train / eval |",
             "|---|---|---|---|---|---|---|---|" + "---|" * len(SITES) + "---|"]
    for r in results:
        policy, expert = r["policy"], r["expert"]
        ratio = "-" if r["policy_over_expert"] is None else f"{r['policy_over_expert']:.2f}"
        seconds = r["seconds"]
        lines.append(
            f"| {r['task']} | {r['training_robots']} x {r['training_episodes']} | {r['steps']} "
            f"| {policy['pc_success']:.1f}% [{policy['ci95'][0]:.0f}, {policy['ci95'][1]:.0f}] "
            f"| {expert['pc_success']:.1f}% [{expert['ci95'][0]:.0f}, {expert['ci95'][1]:.0f}] | {ratio} "
            f"| >= {r['goal']:.2f} | {'yes' if r['met'] else 'no'} | "
            + " | ".join(f"{r['policy_per_site'].get(site, float('nan')):.1f}%" for site in SITES)
            + f" | {seconds['collect']} / {seconds['train']} / {seconds['evaluate']} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(FullRunConfig, __doc__, argv)
    root = Path(config.out)
    command = "python -m experiments.full_run" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    results = []
    for index, task in enumerate(config.tasks):
        out = root / task
        out.mkdir(parents=True, exist_ok=True)
        seconds = {stage: run_step(f"{task} {stage}", line, out / f"{stage}.log")
                   for stage, line in task_commands(config, task, index, out).items()}
        info = json.loads((out / "eval" / "eval_info.json").read_text())
        results.append(task_result(config, task, index, info, seconds))
        print(f"{task}: policy {results[-1]['policy']['pc_success']:.1f}%, "
              f"expert {results[-1]['expert']['pc_success']:.1f}%")

    facts = machine_facts()
    result = {"experiment": "full_run", "machine": facts, "config": asdict(config), "command": command,
              "results": results}
    write_results("full_run", result, Path(config.results_dir))
    text = table(results, facts, command, config)
    write_section(Path(config.docs), "full_run", "## The recorded full run", text)
    print(text)
    return result


if __name__ == "__main__":
    main()
