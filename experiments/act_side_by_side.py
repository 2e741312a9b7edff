"""ACT trained two ways on the same fleet, evaluated on the same robots and held-out seeds.

    .venv/bin/python -m experiments.act_side_by_side        # push, 50 robots x 40 demos, 5000 steps
    .venv/bin/python -m experiments.act_side_by_side --task pick_place --cameras front wrist ...  # visuomotor

1. ``collect --task push`` (state only; with ``--cameras``, those cameras at ``--image-size``) and
   ``dataset export-lerobot`` of it (its default: ``observation.state`` and every camera);
2. **ours**: ``python train/bc.py --policy act`` on the fleet store, one process;
3. **lerobot-train**: ``lerobot-train --policy.type=act`` on the export, offline, with
   ``--num_workers 2``;
4. ``evaluate`` of the scripted expert, our run and lerobot-train's ``pretrained_model``,
   on the same robots and held-out seeds.

Both train LeRobot's ``ACTPolicy`` at the same sizes (``train/policies/lerobot_policies.SMALL``),
chunk (16, 8 executed), batch, steps and peak learning rate (lerobot-train's backbone too:
neither starts from pretrained weights). Each keeps its own schedule: ours warms up and
decays along a cosine, lerobot-train's ACT preset holds the rate constant. With cameras,
both read what a real robot has (``proprio+cameras``). ``--threads N`` gives each trainer N
torch threads (bc.py ``--threads``, lerobot-train ``OMP_NUM_THREADS``). Training time is the
wall-clock of the training command, start-up included. Goal: ours at least as successful as
lerobot-train's, and faster.

Every stage resumes or is skipped when done. The table goes into ``--docs`` and
``--results-dir/act_side_by_side.json`` (``act_side_by_side_visuomotor`` with cameras), with the
command that reproduces it and the lerobot-train command it ran.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.act_vs_lerobot import lerobot_command, lerobot_env, lerobot_shell, ours_command
from benchmarks.common import machine_facts, write_results
from core.files import repo_relative
from core.options import check_options, parse_config
from experiments.render import write
from experiments.full_run import StageClock, evaluate_command, finished_evaluation, percent, seeds_of, trained_step
from sim.fleet import SITES

NAME = "act_side_by_side"


@dataclass
class SideBySideConfig:
    task: str = field(default="push", metadata={"help": "task collected and trained on"})
    robots: int = field(default=50, metadata={"help": "robots collected for training"})
    episodes: int = field(default=40, metadata={"help": "episodes per robot"})
    steps: int = field(default=5000, metadata={"help": "training steps of both trainers"})
    batch_size: int = field(default=64, metadata={"help": "windows per step of both trainers"})
    lr: float = field(default=3e-4, metadata={"help": "peak learning rate of both trainers"})
    lerobot_workers: int = field(default=2, metadata={"help": "lerobot-train --num_workers"})
    cameras: tuple[str, ...] = field(default=(), metadata={
        "help": "cameras collected, e.g. front wrist: both trainers read proprio+cameras (default: state only)"})
    image_size: int = field(default=64, metadata={"help": "camera image height and width (with --cameras)"})
    threads: int = field(default=0, metadata={"help": "torch threads of each trainer (0: each trainer's default)"})
    eval_robots: int = field(default=50, metadata={"help": "robots evaluated (the training fleet's first N)"})
    eval_episodes: int = field(default=10, metadata={"help": "held-out episodes per evaluated robot"})
    seed: int = field(default=0, metadata={"help": "fleet seed"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers for collect and evaluate"})
    out: str = field(default=f"runs/{NAME}", metadata={"help": "directory for data, runs, evaluations and logs"})
    docs: str = field(default="docs/lerobot.md", metadata={"help": "markdown file for the table"})
    results_dir: str = field(default="experiments/results", metadata={"help": f"where {NAME}.json is written"})

    def __post_init__(self):
        check_options(self, ("robots", "episodes", "steps", "batch_size", "lerobot_workers", "eval_robots",
                             "eval_episodes", "workers", "image_size"), lambda value: value >= 1, "must be at least 1")
        check_options(self, ("threads",), lambda value: value >= 0, "must not be negative")
        self.cameras = tuple(self.cameras)

    @property
    def name(self) -> str:
        """The results' and the docs section's name: ``act_side_by_side``, ``_visuomotor`` with cameras."""
        return NAME + ("_visuomotor" if self.cameras else "")

    def collect_options(self) -> list[str]:
        """collect's camera options (none for a state-only run)."""
        return ["--cameras", *self.cameras, "--image-size", str(self.image_size)] if self.cameras else []


def lerobot_step(output_dir: Path) -> int | None:
    """The step of lerobot-train's last checkpoint in ``output_dir``, if it wrote one."""
    step_file = output_dir / "checkpoints" / "last" / "training_state" / "training_step.json"
    return json.loads(step_file.read_text())["step"] if step_file.exists() else None


def row(name: str, info: dict, seconds: float | None, steps: int) -> dict:
    return {"trainer": name, "train_seconds": None if seconds is None else round(seconds),
            "steps_per_s": None if not seconds else round(steps / seconds, 2),
            "success": {k: info["fleet"][k] for k in ("n_episodes", "pc_success", "ci95")},
            "per_site": {site: info["per_site"][site]["pc_success"] for site in SITES if site in info["per_site"]}}


def section_text(result: dict) -> str:
    """The docs section of a results file: its rows under the experiment's and lerobot-train's commands."""
    rows, facts, command, lerobot_train = result["rows"], result["machine"], result["command"], result["lerobot_command"]
    config = result["config"]
    inputs = (f"proprio + {' + '.join(config['cameras'])} cameras at {config['image_size']} px" if config["cameras"]
              else "state")
    lines = [f"Measured {facts['date']} on {facts['cores']} cores ({facts['device']}), code {facts['code_version']}: "
             f"{config['task']} from {inputs}, {config['robots']} robots x {config['episodes']} demos, ACT (small) for "
             f"{config['steps']} steps at batch {config['batch_size']}, peak lr {config['lr']:g}; {config['eval_robots']} robots x "
             f"{config['eval_episodes']} held-out episodes, all on the same seeds. The experiment, and the lerobot-train "
             "command it ran:", "", "```bash", command, lerobot_train, "```", "",
             "| trainer | training wall-clock | steps/s (wall-clock) | success | " + " | ".join(SITES) + " |",
             "|---|---|---|---|" + "---|" * len(SITES)]
    for r in rows:
        clock = "-" if r["train_seconds"] is None else f"{r['train_seconds']} s"
        steps = "-" if r["steps_per_s"] is None else f"{r['steps_per_s']:.1f}"
        sites = [f"{r['per_site'][site]:.1f}%" if site in r["per_site"] else "-" for site in SITES]
        lines.append(f"| {r['trainer']} | {clock} | {steps} | {percent(r['success'])} | " + " | ".join(sites) + " |")
    return "\n".join(lines)


def summary_text(result: dict) -> str:
    """Ours against lerobot-train's success, the expert's, and how much less wall-clock ours took, for the README."""
    success = {row["trainer"]: row["success"]["pc_success"] for row in result["rows"]}
    return (f"{success['ours: train/bc.py']:.1f}% against {success['lerobot-train']:.1f}% (expert "
            f"{success['scripted expert']:.0f}%), {result['speedup']:.1f}× less wall-clock")


def collect_and_export(config: SideBySideConfig, clock: StageClock, data: Path, export: Path, out: Path) -> None:
    """Collect the fleet into ``data`` and export it to ``export`` (each skipped when done)."""
    clock.run("collect", "collect", [sys.executable, "-m", "collect.cli", "--task", config.task, "--robots",
                                     str(config.robots), "--episodes", str(config.episodes), "--seed", str(config.seed),
                                     *config.collect_options(), "--workers", str(config.workers), "--out", str(data),
                                     "--quiet"],
              out / "collect.log")
    if not (export / "meta" / "robofleet.json").exists():  # the sidecar is written last
        shutil.rmtree(export, ignore_errors=True)
        clock.run("export", "export", [sys.executable, "-m", "dataset.cli", "export-lerobot", str(data), str(export)],
                  out / "export.log")


def lerobot_train_command(config: SideBySideConfig, export: Path, output_dir: Path) -> list[str]:
    """lerobot-train's command: ``lerobot_command`` at the config's sizes, one peak rate for the whole model."""
    return lerobot_command(export, output_dir, config.steps, config.batch_size, config.lerobot_workers,
                           f"--policy.optimizer_lr={config.lr}", f"--policy.optimizer_lr_backbone={config.lr}",
                           f"--save_freq={config.steps}", f"--seed={config.seed}")


def train_both(config: SideBySideConfig, clock: StageClock, data: Path, export: Path, out: Path) -> None:
    """Train ours into ``out/ours`` and lerobot-train into ``out/lerobot`` (each skipped when done)."""
    ours, lerobot = out / "ours", out / "lerobot"
    threads = ["--threads", str(config.threads)] if config.threads else []
    if trained_step(ours) != config.steps:
        clock.run("ours train", "ours train", ours_command(data, ours, config.steps, config.batch_size, "--lr",
                                                           str(config.lr), "--seed", str(config.seed), *threads),
                  out / "ours.train.log")
    if lerobot_step(lerobot) != config.steps:
        shutil.rmtree(lerobot, ignore_errors=True)  # lerobot-train refuses an existing output_dir
        clock.seconds.pop("lerobot train", None)
        env = lerobot_env(out) | ({"OMP_NUM_THREADS": str(config.threads)} if config.threads else {})
        clock.run("lerobot train", "lerobot-train", lerobot_train_command(config, export, lerobot),
                  out / "lerobot.train.log", env)


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(SideBySideConfig, __doc__, argv)
    command = f"python -m experiments.{NAME}" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    out = Path(config.out).resolve()  # absolute: the stages run with the repository as their directory
    out.mkdir(parents=True, exist_ok=True)
    clock = StageClock(out / "seconds.json")
    data, export = out / "data", out / "lerobot_data"
    collect_and_export(config, clock, data, export, out)
    train_both(config, clock, data, export, out)

    episodes = config.eval_robots * config.eval_episodes
    agents = {"expert": ["--expert"], "ours": ["--checkpoint", str(out / "ours")],
              "lerobot-train": ["--checkpoint", str(out / "lerobot" / "checkpoints" / "last" / "pretrained_model")]}
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

    rows = [row("scripted expert", infos["expert"], None, config.steps),
            row("ours: train/bc.py", infos["ours"], clock.seconds["ours train"], config.steps),
            row("lerobot-train", infos["lerobot-train"], clock.seconds["lerobot train"], config.steps)]
    ours_row, theirs_row = rows[1], rows[2]
    goals = {"as_successful": ours_row["success"]["pc_success"] >= theirs_row["success"]["pc_success"],
             "faster": ours_row["train_seconds"] < theirs_row["train_seconds"]}
    facts = machine_facts()
    shown = lerobot_shell(lerobot_train_command(config, Path(repo_relative(export)),
                                                Path(repo_relative(out / "lerobot"))))
    result = {"experiment": config.name, "machine": facts, "config": asdict(config), "command": command,
              "lerobot_command": shown, "rows": rows,
              "speedup": round(theirs_row["train_seconds"] / ours_row["train_seconds"], 2), "goals": goals}
    write_results(config.name, result, Path(config.results_dir))
    heading = "## ACT two ways: train/bc.py and lerobot-train, side by side" + (
        " (visuomotor)" if config.cameras else "")
    print(write(config.name, result, config.docs, heading))
    return result


if __name__ == "__main__":
    main()
