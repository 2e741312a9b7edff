"""Distillation, measured: a state ACT teacher and a small MLP student, on the same robots and seeds.

    .venv/bin/python -m experiments.distillation       # pick_place, 50 robots x 40 demos

1. ``collect --task pick_place`` (state only);
2. **teacher**: ``torchrun train/bc.py`` on the expert's demonstrations: LeRobot's ACT
   (small) on ``--inputs state``, the kind of model a server trains;
3. **student**: ``torchrun train/distill.py --teacher``, a small MLP trained on the
   teacher's actions, then ``--dagger-rounds`` rounds of DAgger;
4. ``evaluate`` of the expert, the teacher and the student on the same robots and held-out seeds;
5. ``benchmarks.policy_latency --checkpoint`` of both: per-step latency on 1 CPU thread at
   batch 1, parameters, and the bytes of the checkpoint a robot is sent;
6. one federated round (``train/federated.py --rounds 1``) of a model of each size on
   ``--fed-robots`` robots: the bytes up and down.

Goals (issue 29): the student keeps >= 95% of the teacher's fleet success, with <= 10% of its
parameters, >= 5x lower per-step latency and >= 10x fewer bytes per model sent. Every stage
resumes or is skipped when done; the table goes into ``--docs`` and
``--results-dir/distillation.json`` with the command that reproduces it. Measure the
latency on a quiet machine: delete ``OUT/latency.json`` to measure it again.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.common import machine_facts, write_results
from core.options import check_options, parse_config
from experiments.full_run import StageClock, evaluate_command, finished_evaluation, percent, seeds_of, trained_step
from experiments.render import write
from sim.fleet import SITES

NAME = "distillation"
GOALS = {"success_kept": 0.95, "parameters": 0.10, "latency_speedup": 5.0, "bytes_fewer": 10.0}


@dataclass
class DistillationConfig:
    task: str = field(default="pick_place", metadata={"help": "task collected and trained on"})
    robots: int = field(default=50, metadata={"help": "robots collected for training"})
    episodes: int = field(default=40, metadata={"help": "demonstrations per robot"})
    teacher_policy: str = field(default="act", metadata={"help": "the teacher's kind (state inputs)"})
    teacher_hidden: tuple[int, ...] = field(default=(256, 256), metadata={"help": "the teacher's widths, if an mlp"})
    teacher_steps: int = field(default=8000, metadata={"help": "the teacher's training steps"})
    teacher_batch_size: int = field(default=64, metadata={"help": "the teacher's windows per rank per step"})
    teacher_lr: float = field(default=3e-4, metadata={"help": "the teacher's peak learning rate"})
    student_hidden: tuple[int, ...] = field(default=(128, 128), metadata={"help": "the student MLP's widths"})
    student_steps: int = field(default=6000, metadata={"help": "the student's steps on the store"})
    student_batch_size: int = field(default=64, metadata={"help": "the student's windows per rank per step"})
    dagger_rounds: int = field(default=1, metadata={"help": "DAgger rounds after them"})
    dagger_episodes: int = field(default=4, metadata={"help": "episodes per robot in each round"})
    dagger_steps: int = field(default=2000, metadata={"help": "the student's steps after each round"})
    ranks: int = field(default=2, metadata={"help": "DDP ranks (torchrun --nproc_per_node)"})
    eval_robots: int = field(default=50, metadata={"help": "robots evaluated (the training fleet's first N)"})
    eval_episodes: int = field(default=10, metadata={"help": "held-out episodes per evaluated robot"})
    latency_calls: int = field(default=300, metadata={"help": "timed calls per policy in the latency benchmark"})
    fed_robots: int = field(default=9, metadata={"help": "robots in the federated round"})
    seed: int = field(default=0, metadata={"help": "fleet seed"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers for collect and evaluate"})
    out: str = field(default=f"runs/{NAME}", metadata={"help": "directory for data, runs, evaluations and logs"})
    docs: str = field(default="docs/distillation.md", metadata={"help": "markdown file for the table"})
    results_dir: str = field(default="experiments/results", metadata={"help": f"where {NAME}.json is written"})

    def __post_init__(self):
        check_options(self, ("robots", "episodes", "teacher_steps", "teacher_batch_size", "student_steps",
                             "student_batch_size", "dagger_episodes", "dagger_steps", "ranks", "eval_robots",
                             "eval_episodes", "latency_calls",
                             "fed_robots", "workers"), lambda value: value >= 1, "must be at least 1")
        check_options(self, ("dagger_rounds",), lambda value: value >= 0, "must not be negative")
        self.teacher_hidden, self.student_hidden = tuple(self.teacher_hidden), tuple(self.student_hidden)


def torchrun(config: DistillationConfig, script: str, *arguments: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={config.ranks}",
            f"train/{script}", "--seed", str(config.seed), *arguments]


def federated_traffic(config: DistillationConfig, clock: StageClock, name: str, data: Path, policy: list[str],
                      out: Path) -> dict:
    """Bytes up and down of one FedAvg round of the ``policy`` options' model on the first ``fed_robots`` robots."""
    run = out / f"federated_{name}"
    if not (run / "metrics.jsonl").exists() or '"round": 1' not in (run / "metrics.jsonl").read_text():
        clock.run(f"{name} federated", f"{name} federated round",
                  [sys.executable, "train/federated.py", "--data", str(data), "--out", str(run), "--rounds", "1",
                   *policy, "--robots", *map(str, range(config.fed_robots)),
                   "--workers", str(config.workers), "--seed", str(config.seed), "--quiet"],
                  out / f"{name}.federated.log")
    record = next(json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
                  if json.loads(line).get("round") == 1)
    return {"clients": config.fed_robots, "bytes_up": record["bytes_up"], "bytes_down": record["bytes_down"]}


def latency(config: DistillationConfig, clock: StageClock, runs: dict[str, Path], out: Path) -> dict[str, dict]:
    """benchmarks.policy_latency's rows for the teacher's and the student's checkpoints, by name."""
    path = out / "latency.json"
    if not path.exists():
        clock.run("latency", "latency", [sys.executable, "-m", "benchmarks.policy_latency", "--checkpoint",
                                         *map(str, runs.values()), "--repetitions", str(config.latency_calls),
                                         "--out", str(path)], out / "latency.log")
    rows = [row for row in json.loads(path.read_text())["rows"] if row["device"] == "cpu"]
    return {name: next(row for row in rows if row["case"] == str(run)) for name, run in runs.items()}


def section_text(result: dict) -> str:
    """The docs section of a results file: each policy's row, and the student's ratios to the teacher's."""
    rows, ratios, facts, command, config = (result[key] for key in ("rows", "ratios", "machine", "command", "config"))
    lines = [f"Measured {facts['date']} on {facts['cores']} cores ({facts['device']}), code {facts['code_version']}: "
             f"{config['task']}, {config['robots']} robots x {config['episodes']} demos; {config['eval_robots']} robots x "
             f"{config['eval_episodes']} held-out episodes, all on the same seeds. Latency: one `select_action` that "
             "runs the model, 1 CPU thread, batch 1. Bytes: the checkpoint a robot is sent.", "",
             "```bash", command, "```", "",
             "| policy | training | success | " + " | ".join(SITES) + " | parameters | latency median / p99 | bytes "
             "| federated round up / down |", "|---|---|---|" + "---|" * len(SITES) + "---|---|---|---|"]
    for r in rows:
        sites = [f"{r['per_site'][site]:.1f}%" if site in r["per_site"] else "-" for site in SITES]
        size = "-" if r.get("parameters") is None else (
            f"{r['parameters']:,} | {r['latency_ms'][0]:.3f} / {r['latency_ms'][1]:.3f} ms | {r['bytes'] / 1e6:.2f} MB "
            f"| {r['federated']['bytes_up'] / 1e6:.2f} / {r['federated']['bytes_down'] / 1e6:.2f} MB")
        lines.append(f"| {r['name']} | {r['training']} | {percent(r['success'])} | " + " | ".join(sites)
                     + f" | {size if size != '-' else '- | - | - | -'} |")
    lines += ["", "Student over teacher: " + ", ".join(
        f"{name.replace('_', ' ')} {value:.3g} (goal {'<=' if name == 'parameters' else '>='} {result['goals'][name]:g})"
        for name, value in ratios.items())]
    return "\n".join(lines)


def train_seconds_text(result: dict) -> str:
    """How long the teacher and the student trained: ``the teacher 943 s, the student 222 s``."""
    seconds = result["seconds"]
    return f"the teacher {seconds['teacher train']} s, the student {seconds['student distill']} s"


def ratios_text(result: dict) -> str:
    """The student over the teacher, for the README: success kept, parameters, latency and bytes."""
    ratios = result["ratios"]
    return (f"{ratios['success_kept']:.2f}×, {ratios['parameters']:.1%}, {ratios['latency_speedup']:.1f}×, "
            f"{ratios['bytes_fewer']:.0f}×")


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(DistillationConfig, __doc__, argv)
    command = f"python -m experiments.{NAME}" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    out = Path(config.out).resolve()  # absolute: the stages run with the repository as their directory
    out.mkdir(parents=True, exist_ok=True)
    clock = StageClock(out / "seconds.json")
    data, teacher, student = out / "data", out / "teacher", out / "student"
    clock.run("collect", "collect", [sys.executable, "-m", "collect.cli", "--task", config.task, "--robots",
                                     str(config.robots), "--episodes", str(config.episodes), "--seed", str(config.seed),
                                     "--workers", str(config.workers), "--out", str(data), "--quiet"],
              out / "collect.log")
    policies = {"teacher": ["--policy", config.teacher_policy, "--inputs", "state",
                            "--hidden", *map(str, config.teacher_hidden)],
                "student": ["--policy", "mlp", "--hidden", *map(str, config.student_hidden)]}
    if trained_step(teacher) != config.teacher_steps:
        clock.run("teacher train", "teacher train",
                  torchrun(config, "bc.py", "--data", str(data), "--out", str(teacher), *policies["teacher"],
                           "--max-steps", str(config.teacher_steps), "--batch-size", str(config.teacher_batch_size),
                           "--lr", str(config.teacher_lr)),
                  out / "teacher.train.log")
    student_steps = config.student_steps + config.dagger_rounds * config.dagger_steps
    if trained_step(student) != student_steps:
        clock.run("student distill", "student distill",
                  torchrun(config, "distill.py", "--teacher", str(teacher), "--data", str(data), "--out", str(student),
                           *policies["student"], "--max-steps", str(config.student_steps),
                           "--batch-size", str(config.student_batch_size),
                           "--dagger-rounds", str(config.dagger_rounds), "--dagger-episodes",
                           str(config.dagger_episodes), "--dagger-steps", str(config.dagger_steps),
                           "--workers", str(config.workers)),
                  out / "student.distill.log")

    episodes = config.eval_robots * config.eval_episodes
    agents = {"expert": ["--expert"], "teacher": ["--checkpoint", str(teacher)],
              "student": ["--checkpoint", str(student)]}
    infos = {}
    for name, agent in agents.items():
        evaluation = out / f"eval_{name}"
        if finished_evaluation(evaluation, None, episodes) is None:
            clock.run(f"{name} evaluate", f"{name} evaluate",
                      evaluate_command(config, [*agent, "--task", config.task], evaluation),
                      out / f"{name}.eval.log")
        infos[name] = finished_evaluation(evaluation, None, episodes)
    if len({tuple(seeds_of(info)) for info in infos.values()}) != 1:
        raise SystemExit("error: the three evaluations ran on different seeds")

    sizes = latency(config, clock, {"teacher": teacher, "student": student}, out)
    widths = {name: "x".join(map(str, hidden)) for name, hidden in
              (("teacher", config.teacher_hidden), ("student", config.student_hidden))}
    teacher_kind = f"mlp {widths['teacher']}" if config.teacher_policy == "mlp" else f"{config.teacher_policy} (small)"
    trainings = {"expert": "scripted", "teacher": f"bc.py, {teacher_kind}, {config.teacher_steps} steps",
                 "student": f"distill.py, mlp {widths['student']}, {config.student_steps} steps + "
                            f"{config.dagger_rounds} DAgger round(s) x {config.dagger_steps}"}
    rows = []
    for name, info in infos.items():
        row = {"name": name, "training": trainings[name], "train_seconds": round(clock.seconds.get(
                   {"teacher": "teacher train", "student": "student distill"}.get(name, ""), 0)) or None,
               "success": {k: info["fleet"][k] for k in ("n_episodes", "pc_success", "ci95")},
               "per_site": {site: info["per_site"][site]["pc_success"] for site in SITES if site in info["per_site"]}}
        if name in sizes:
            timing = sizes[name]["ms"]["select_action"]
            row.update(parameters=sizes[name]["parameters"], bytes=sizes[name]["checkpoint_bytes"],
                       latency_ms=[timing["median"], timing["p99"]],
                       federated=federated_traffic(config, clock, name, data, policies[name], out))
        rows.append(row)
    by_name = {row["name"]: row for row in rows}
    teacher_row, student_row = by_name["teacher"], by_name["student"]
    ratios = {"success_kept": student_row["success"]["pc_success"] / max(teacher_row["success"]["pc_success"], 1e-9),
              "parameters": student_row["parameters"] / teacher_row["parameters"],
              "latency_speedup": teacher_row["latency_ms"][0] / student_row["latency_ms"][0],
              "bytes_fewer": teacher_row["bytes"] / student_row["bytes"]}
    met = {name: value >= GOALS[name] if name != "parameters" else value <= GOALS[name]
           for name, value in ratios.items()}
    facts = machine_facts()
    result = {"experiment": NAME, "machine": facts, "config": asdict(config), "command": command, "rows": rows,
              "ratios": {k: round(v, 4) for k, v in ratios.items()}, "goals": GOALS, "met": met,
              "seconds": {k: round(v) for k, v in clock.seconds.items()}}
    write_results(NAME, result, Path(config.results_dir))
    print(write(NAME, result, config.docs))
    return result


if __name__ == "__main__":
    main()
