"""The recorded full runs: collect, train and evaluate each task, every policy beside the scripted expert.

    .venv/bin/python -m experiments.full_run                         # state: the MLP on reach, push, pick_place
    .venv/bin/python -m experiments.full_run --setting visuomotor    # cnn, act, diffusion from cameras
    .venv/bin/python -m experiments.full_run --tasks reach --robots 3 --episodes 4 --steps 50 \\
        --eval-robots 3 --eval-episodes 2 --out /tmp/full --docs /tmp/full/evaluation.md --results-dir /tmp/full

A setting (``SETTINGS``) is a set of defaults, and every option overrides it:

- ``state``: the MLP on ``observation.state`` plus the privileged object and goal state;
- ``visuomotor``: what a real robot has, ``observation.state`` plus the front and wrist
  cameras and no privileged state (``--inputs proprio+cameras``), for the cnn and
  LeRobot's act and diffusion (small configs).

``--policy-steps act=N`` trains one policy kind for its own number of steps and
``--policy-lr act=LR`` at its own learning rate (the visuomotor setting gives act and
diffusion, which train 3-7x slower than the cnn on CPU, both); ``--action-modes K`` gives the mlp
and cnn a mixture head (docs/training.md, "Demonstrations that branch").

For each task, as a user would run it (each stage a subprocess, its output in a log
under ``--out/TASK``):

1. ``collect --robots R --episodes E --task T`` (``--cameras`` in the visuomotor setting);
2. ``evaluate --expert --task T --robots N --episodes K``: the scripted expert on the
   held-out seeds, once per task;
3. for each policy, ``torchrun --nproc_per_node=RANKS train/bc.py --policy P --inputs I``
   and ``evaluate --checkpoint`` on the same robots; the script checks that the policy
   ran on exactly the expert's seeds. ``--videos K`` records K episodes of each policy,
   one per site first.

Goals: policy success over the expert's (fleet) of ``GOALS[setting][task]``, and in the
visuomotor setting >= 0.85 of the expert's on every site as well. The table of every
policy finished so far, and ``--results-dir/NAME.json`` (NAME: ``full_run``, or
``full_run_visuomotor``), are written after each one, so figures land as they come. Rows
recorded there before for other (task, policy, training data) stay, each under the command that
measured it: ``--policies act`` adds act's rows beside the cnn's, and ``--episodes 20`` the cnn's
row on 20 demonstrations a robot beside its row on 160. Every stage resumes:
collect and train carry on, and a finished evaluation of the final checkpoint is kept.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.common import machine_facts, write_results
from core.files import REPO, repo_relative
from core.options import check_options, parse_config
from experiments.common import merged_rows, run_step
from experiments.render import write
from sim.fleet import SITES
from train.checkpoint import latest_checkpoint, open_checkpoint
from train.policies.policy import POLICIES, policy_class

SETTINGS = {  # the defaults of each setting; per-task ones are dicts (a task not named gets the largest value)
    "state": {"tasks": ("reach", "push", "pick_place"), "policies": ("mlp",), "inputs": "state", "cameras": (),
              # sized from a probe (docs/evaluation.md): push is the data-hungry one
              "episodes": {"reach": 20, "push": 100, "pick_place": 40},
              "steps": {"reach": 2000, "push": 20000, "pick_place": 10000}, "ema_decay": {"reach": 0.0},
              "hidden": (512, 512, 512), "batch_size": 256, "videos": 0},
    "visuomotor": {"tasks": ("pick_place", "push"), "policies": ("cnn", "act", "diffusion"),
                   "inputs": "proprio+cameras", "cameras": ("front", "wrist"),
                   # pick_place: more data, steps and a weight average than push (0.93 of the expert at 40 x 6000,
                   # 0.948 at 80 x 8000, 0.954 at 160 x 8000); 12000 steps reached no more than 8000
                   # (experiments/results/pick_place_demonstrations.json, pick_place_validation.json)
                   "episodes": {"pick_place": 160, "push": 40}, "steps": {"pick_place": 8000, "push": 5000},
                   "ema_decay": {"pick_place": 0.999, "push": 0.0}, "hidden": (256, 256), "batch_size": 64,
                   # LeRobot's act and diffusion train at ~70 and ~47 windows/s on 2 CPU ranks (the cnn: ~300),
                   # 70 and 49 min on pick_place 50 x 80 (full_run_visuomotor.json): both still limited by steps
                   "policy_steps": ("act=2000", "diffusion=1000"), "policy_lr": ("act=0.0003", "diffusion=0.0003"),
                   "videos": 3},
}
PER_TASK = ("episodes", "steps", "ema_decay")
PER_POLICY = ("policy_steps", "policy_lr")  # POLICY=VALUE entries; a setting's stand unless named again
GOALS = {"state": {"reach": 0.95}, "visuomotor": {"pick_place": 0.95, "push": 0.85}}  # policy / expert success
DEFAULT_GOAL = 0.90
SITE_GOAL = {"visuomotor": 0.85}  # policy / expert success on every site


@dataclass
class FullRunConfig:
    setting: str = field(default="state", metadata={"help": "state or visuomotor: the defaults below"})
    tasks: tuple[str, ...] = field(default=(), metadata={"help": "tasks, in order (default: the setting's)"})
    policies: tuple[str, ...] = field(default=(), metadata={"help": "policy kinds trained on each task"})
    inputs: str | None = field(default=None, metadata={"help": "what the policies see (train/bc.py --inputs)"})
    cameras: tuple[str, ...] = field(default=(), metadata={"help": "cameras collected (visuomotor: front wrist)"})
    image_size: int = field(default=64, metadata={"help": "camera image size, pixels"})
    robots: int = field(default=50, metadata={"help": "robots collected for training (fleet seed --seed)"})
    episodes: tuple[int, ...] = field(default=(), metadata={"help": "training episodes per robot, per task"})
    steps: tuple[int, ...] = field(default=(), metadata={"help": "training steps, per task"})
    ema_decay: tuple[float, ...] = field(default=(), metadata={
        "help": "decay of the weight average that is evaluated, per task (0: none; train/bc.py --ema-decay)"})
    policy_steps: tuple[str, ...] = field(default=(), metadata={
        "help": "POLICY=STEPS: train that policy kind for STEPS on every task in place of --steps, without the "
                "weight average (a short run's average still holds its first weights); for act and diffusion, "
                "which train 3-7x slower than the cnn on CPU (the setting's entries stand for kinds not named)"})
    policy_lr: tuple[str, ...] = field(default=(), metadata={
        "help": "POLICY=LR: that policy kind's peak learning rate (train/bc.py --lr, whose default suits the mlp "
                "and cnn)"})
    hidden: tuple[int, ...] = field(default=(), metadata={"help": "MLP (and cnn head) hidden widths"})
    action_modes: int = field(default=1, metadata={
        "help": "mlp and cnn head: 1 regresses the action chunk, K > 1 a mixture of K Gaussians (train/bc.py)"})
    mode_actions: tuple[str, ...] = field(default=(), metadata={
        "help": "with --action-modes K > 1: the action dimensions the modes span (train/bc.py; default: all)"})
    batch_size: int | None = field(default=None, metadata={"help": "windows per rank per step"})
    val_fraction: float = field(default=0.05, metadata={"help": "training episodes held out for the validation loss"})
    ranks: int = field(default=2, metadata={"help": "DDP ranks (torchrun processes)"})
    eval_robots: int = field(default=50, metadata={"help": "robots evaluated (the training fleet's first N)"})
    eval_episodes: int = field(default=10, metadata={"help": "held-out episodes per evaluated robot"})
    videos: int | None = field(default=None, metadata={
        "help": "episodes recorded as MP4 per policy (one per site first)"})
    seed: int = field(default=0, metadata={"help": "fleet seed"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers for collect and evaluate"})
    out: str = field(default="", metadata={"help": "directory for data, runs, evaluations and logs "
                                                   "(default: runs/NAME)"})
    docs: str = field(default="docs/evaluation.md", metadata={"help": "markdown file for the table"})
    media: str = field(default="docs/media", metadata={"help": "where the best policy's videos are copied"})
    results_dir: str = field(default="experiments/results", metadata={"help": "where NAME.json is written"})

    def __post_init__(self):
        if self.setting not in SETTINGS:
            raise ValueError(f"--setting must be one of {', '.join(SETTINGS)}, got {self.setting!r}")
        per_policy = {name: {**parse_per_policy(name, SETTINGS[self.setting].get(name, ())),
                             **parse_per_policy(name, getattr(self, name))} for name in PER_POLICY}
        for name, default in SETTINGS[self.setting].items():  # options left unset take the setting's value
            if getattr(self, name) in (None, ()):
                if name in PER_TASK:
                    default = tuple(default.get(task, max(default.values())) for task in self.tasks)
                setattr(self, name, default)
        self.out = self.out or f"runs/{self.name}"
        for name in PER_TASK:
            values = getattr(self, name)
            if len(values) not in (1, len(self.tasks)):
                raise ValueError(f"--{name.replace('_', '-')} takes one value or one per task ({len(self.tasks)}), "
                                 f"got {len(values)}")
        self.steps_of_policy, self.lr_of_policy = per_policy["policy_steps"], per_policy["policy_lr"]
        self.policy_steps, self.policy_lr = (tuple(f"{k}={v}" for k, v in values.items()) for values in
                                             (self.steps_of_policy, self.lr_of_policy))  # as saved with the results
        check_options(self, ("robots", "eval_robots", "eval_episodes", "ranks", "batch_size", "workers", "image_size",
                             "action_modes"),
                      lambda value: value >= 1, "must be at least 1")
        check_options(self, ("videos",), lambda value: value >= 0, "must not be negative")

    @property
    def name(self) -> str:
        """The results' name: ``full_run`` for the state setting, ``full_run_<setting>`` for the others."""
        return "full_run" if self.setting == "state" else f"full_run_{self.setting}"

    def per_task(self, name: str, task_index: int) -> float:
        values = getattr(self, name)
        return values[task_index] if len(values) > 1 else values[0]

    def modes_of(self, policy: str) -> int | None:
        """``--action-modes`` for a policy kind with a mixture head (mlp, cnn), else None."""
        return self.action_modes if policy_class(policy).mixture_head else None

    def training(self, policy: str, task_index: int) -> tuple[int, float, float | None]:
        """Steps, weight-average decay and learning rate (None: bc.py's) of ``policy`` on the task:
        ``--policy-steps`` (with no weight average), else the task's; ``--policy-lr``."""
        lr = self.lr_of_policy.get(policy)
        if policy in self.steps_of_policy:
            return self.steps_of_policy[policy], 0.0, lr
        return self.per_task("steps", task_index), self.per_task("ema_decay", task_index), lr


def parse_per_policy(name: str, entries: tuple[str, ...]) -> dict[str, float]:
    """``--policy-steps`` / ``--policy-lr`` entries ``POLICY=VALUE`` as {policy: value}; a bad one is a ValueError."""
    option, convert = f"--{name.replace('_', '-')}", int if name == "policy_steps" else float
    values = {}
    for entry in entries:
        policy, _, text = entry.partition("=")
        try:
            value = convert(text)
        except ValueError:
            value = 0
        if policy not in POLICIES or not value > 0:
            raise ValueError(f"{option} takes POLICY={name.removeprefix('policy_').upper()}, POLICY one of "
                             f"{', '.join(POLICIES)} and a positive value, got {entry!r}")
        values[policy] = value
    return values


def collect_command(config: FullRunConfig, task: str, index: int, out: Path) -> list[str]:
    cameras = ["--cameras", *config.cameras, "--image-size", str(config.image_size)] if config.cameras else []
    return [sys.executable, "-m", "collect.cli", "--task", task, "--robots", str(config.robots),
            "--episodes", str(config.per_task("episodes", index)), "--seed", str(config.seed), *cameras,
            "--workers", str(config.workers), "--out", repo_relative(out / "data"), "--quiet"]


def train_command(config: FullRunConfig, policy: str, index: int, out: Path) -> list[str]:
    steps, ema_decay, lr = config.training(policy, index)
    modes = (["--action-modes", str(config.action_modes), *(["--mode-actions", *config.mode_actions]
                                                            if config.mode_actions else [])]
             if config.modes_of(policy) else [])
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={config.ranks}",
            "train/bc.py", "--data", repo_relative(out / "data"), "--out", repo_relative(out / policy / "run"),
            "--policy", policy, "--inputs", config.inputs, "--max-steps", str(steps), "--ema-decay", str(ema_decay),
            "--batch-size", str(config.batch_size), "--val-fraction", str(config.val_fraction),
            "--hidden", *map(str, config.hidden), *modes, *(["--lr", str(lr)] if lr else []), "--seed", str(config.seed)]


def evaluate_command(config: FullRunConfig, agent: list[str], out: Path, videos: int = 0) -> list[str]:
    return [sys.executable, "-m", "eval.cli", *agent, "--robots", str(config.eval_robots),
            "--episodes", str(config.eval_episodes), "--seed", str(config.seed), "--videos", str(videos),
            "--workers", str(config.workers), "--out", repo_relative(out), "--overwrite", "--quiet"]


def finished_evaluation(out: Path, step: int | None, episodes: int) -> dict | None:
    """The eval_info of a finished evaluation in ``out`` of ``episodes`` episodes (of checkpoint ``step``), if any."""
    path = out / "eval_info.json"
    if not path.exists():
        return None
    info = json.loads(path.read_text())
    done = info["fleet"]["n_episodes"] == episodes and (step is None or info["checkpoint"]["step"] == step)
    return info if done else None


def trained_step(run: Path) -> int | None:
    last = latest_checkpoint(run)
    return open_checkpoint(last).step if last else None


def seeds_of(info: dict) -> list[tuple[int, int]]:
    return sorted((episode["robot_id"], episode["seed"]) for episode in info["per_episode"])


def policy_result(config: FullRunConfig, task: str, index: int, policy: str, evaluation: Path, expert: dict,
                  seconds: dict) -> dict:
    """One (task, policy) row: success with intervals, per site, over the expert's, and whether the goals hold."""
    info = json.loads((evaluation / "eval_info.json").read_text())
    ratio = info["fleet"]["pc_success"] / expert["fleet"]["pc_success"] if expert["fleet"]["pc_success"] else None
    sites = [site for site in SITES if site in info["per_site"]]
    site_ratios = {site: (info["per_site"][site]["pc_success"] / expert["per_site"][site]["pc_success"]
                          if expert["per_site"][site]["pc_success"] else None) for site in sites}
    goal, site_goal = GOALS[config.setting].get(task, DEFAULT_GOAL), SITE_GOAL.get(config.setting)
    met = ratio is not None and ratio >= goal
    if site_goal is not None:
        met = met and all(r is not None and r >= site_goal for r in site_ratios.values())
    return {
        "task": task, "policy": policy, "action_modes": config.modes_of(policy),
        "mode_actions": list(config.mode_actions) if config.modes_of(policy) else [],
        "inputs": info["checkpoint"]["inputs"],
        "training_robots": config.robots, "training_episodes": config.per_task("episodes", index),
        "steps": info["checkpoint"]["step"], "ema_decay": config.training(policy, index)[1],
        "lr": config.training(policy, index)[2],
        "policy_success": {k: info["fleet"][k] for k in ("n_episodes", "pc_success", "ci95")},
        "expert": {k: expert["fleet"][k] for k in ("n_episodes", "pc_success", "ci95")},
        "policy_per_site": {site: {k: info["per_site"][site][k] for k in ("pc_success", "ci95")} for site in sites},
        "expert_per_site": {site: expert["per_site"][site]["pc_success"] for site in sites},
        "policy_over_expert": ratio, "site_over_expert": site_ratios, "goal": goal, "site_goal": site_goal,
        "met": met, "crashed_episodes": info["fleet"]["n_errors"],
        "videos": [repo_relative(evaluation / video) for video in info.get("video_paths", [])],
        "seconds": {k: round(v) for k, v in seconds.items()},
    }


def modes_of_row(row: dict) -> int:
    """A result row's action modes: 1 for a regressing head and for the kinds without a mixture head."""
    return row.get("action_modes") or 1


def percent(figure: dict) -> str:
    return f"{figure['pc_success']:.1f}% [{figure['ci95'][0]:.0f}, {figure['ci95'][1]:.0f}]"


def section_text(result: dict) -> str:
    """The docs section of a results file: the table of its rows, under the commands that measured them (with
    their date and code)."""
    results, config = result["results"], result["config"]
    cameras = f"{' + '.join(config['cameras'])} cameras at {config['image_size']} px" if config["cameras"] else "no cameras"
    runs: dict[str, list[dict]] = {}
    for r in results:
        runs.setdefault(r["measured"]["command"], []).append(r)
    commands = []
    for command, rows in runs.items():
        facts = rows[0]["measured"]
        commands += [f"# {facts['date']}, {facts['cores']} cores ({facts['device']}), code {facts['code_version']}: "
                     + ", ".join(f"{r['task']} {r['policy']}" for r in rows), command]
    lines = [f"Inputs {config['inputs']} ({cameras}), {config['ranks']} DDP ranks x batch {config['batch_size']}; "
             f"{config['eval_robots']} robots x {config['eval_episodes']} held-out episodes per task, every policy and "
             "the expert on the same seeds. Per site: policy success (the expert's). The rows' commands, "
             "when and on what they ran:", "", "```bash", *commands, "```",
             "", "| task | policy | training data | steps | policy | expert | policy/expert | goal | met | "
             + " | ".join(SITES) + " | collect / train / eval |",
             "|---|---|---|---|---|---|---|---|---|" + "---|" * len(SITES) + "---|"]
    for r in results:
        ratio = "-" if r["policy_over_expert"] is None else f"{r['policy_over_expert']:.3f}"  # 0.948 is not 0.95
        seconds = r["seconds"]
        sites = [f"{r['policy_per_site'][site]['pc_success']:.1f}% ({r['expert_per_site'][site]:.0f}%)"
                 if site in r["policy_per_site"] else "-" for site in SITES]
        over = f" over {' '.join(r['mode_actions'])}" if r.get("mode_actions") else ""
        modes = f" ({r['action_modes']} modes{over})" if modes_of_row(r) > 1 else ""
        lines.append(
            f"| {r['task']} | {r['policy']}{modes} | {r['training_robots']} x {r['training_episodes']} "
            f"| {r['steps']}{' (EMA)' if r.get('ema_decay') else ''} "
            f"| {percent(r['policy_success'])} | {percent(r['expert'])} | {ratio} | >= {r['goal']:.2f} "
            f"| {'yes' if r['met'] else 'no'} | " + " | ".join(sites)
            + f" | {seconds['collect']} / {seconds['train']} / {seconds['evaluate']} s |")
    return "\n".join(lines)


def over_expert_text(result: dict) -> str:
    """Each task's best policy success over the expert's, for the README: ``reach 1.00, push 0.92``."""
    best: dict[str, float] = {}
    for row in result["results"]:
        if row["policy_over_expert"] is not None:
            best[row["task"]] = max(best.get(row["task"], 0.0), row["policy_over_expert"])
    return ", ".join(f"{task} {ratio:.2f}" for task, ratio in best.items())


def publish(config: FullRunConfig, results: list[dict]) -> dict:
    """Write NAME.json and the doc's table with every result so far, beside the rows recorded there for the
    (task, policy, training data) this run does not measure."""
    path = Path(config.results_dir) / f"{config.name}.json"
    recorded = json.loads(path.read_text()) if path.exists() else None
    rows = merged_rows(recorded, results, lambda row: (row["task"], row["policy"], row["training_robots"],
                                                       row["training_episodes"], modes_of_row(row),
                                                       tuple(row.get("mode_actions") or ())), "results")
    command = results[-1]["measured"]["command"]
    result = {"experiment": config.name, "machine": machine_facts(), "config": asdict(config),
              "command": command, "results": rows}
    write_results(config.name, result, Path(config.results_dir))
    heading = "## The recorded full run" + ("" if config.setting == "state" else f" ({config.setting})")
    write(config.name, result, config.docs, heading)
    return result


def copy_videos(config: FullRunConfig, task: str, results: list[dict], recorded: list[dict]) -> None:
    """The task's best policy's videos into ``--media`` (``NAME_TASK_POLICY_SITE.mp4``), for the docs, when this
    run's ``results`` hold it; the best of the ``recorded`` rows had its videos copied by the run that measured it."""
    ranked = [r for r in recorded if r["task"] == task and r["videos"]]
    best = max(ranked, key=lambda r: r["policy_success"]["pc_success"], default=None)
    if best is None or best not in results:
        return
    media = Path(config.media)
    media.mkdir(parents=True, exist_ok=True)
    for video in best["videos"]:
        site = next((s for s in SITES if s in Path(video).name), Path(video).stem)
        shutil.copyfile(REPO / video, media / f"{config.name}_{task}_{best['policy']}_{site}.mp4")


class StageClock:
    """Seconds each stage of a task has taken, summed over the runs that resumed it (``TASK/seconds.json``);
    a stage that starts afresh (``resumes=False``: no store or no checkpoint yet) restarts its count."""

    def __init__(self, path: Path):
        self.path = path
        self.seconds = json.loads(path.read_text()) if path.exists() else {}

    def run(self, stage: str, name: str, command: list[str], log: Path, env: dict[str, str] | None = None, *,
            resumes: bool = True, done: bool = False) -> None:
        """Run one stage (unless it is ``done``: then say it was skipped) and add up its seconds."""
        if done:
            print(f"{name}: finished earlier, skipped")
            return
        earlier = self.seconds.get(stage, 0.0) if resumes else 0.0
        self.seconds[stage] = earlier + run_step(name, command, log, env)
        self.path.write_text(json.dumps(self.seconds, indent=2) + "\n")


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(FullRunConfig, __doc__, argv)
    command = "python -m experiments.full_run" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    results, result = [], {}
    episodes = config.eval_robots * config.eval_episodes
    for index, task in enumerate(config.tasks):
        out = Path(config.out).resolve() / task  # absolute: the stages run with the repository as their directory
        out.mkdir(parents=True, exist_ok=True)
        clock = StageClock(out / "seconds.json")
        clock.run("collect", f"{task} collect", collect_command(config, task, index, out), out / "collect.log",
                  resumes=(out / "data").exists())
        if finished_evaluation(out / "expert", None, episodes) is None:
            expert_command = evaluate_command(config, ["--expert", "--task", task], out / "expert")
            clock.run("expert", f"{task} expert", expert_command, out / "expert.log")
        expert = finished_evaluation(out / "expert", None, episodes)
        for policy in config.policies:
            run, evaluation = out / policy / "run", out / policy / "eval"
            if trained_step(run) != config.training(policy, index)[0]:
                clock.run(f"{policy} train", f"{task} {policy} train", train_command(config, policy, index, out),
                          out / f"{policy}.train.log", resumes=trained_step(run) is not None)
            if finished_evaluation(evaluation, trained_step(run), episodes) is None:
                clock.run(f"{policy} evaluate", f"{task} {policy} evaluate",
                          evaluate_command(config, ["--checkpoint", repo_relative(run)], evaluation, config.videos),
                          out / f"{policy}.eval.log")
            if seeds_of(finished_evaluation(evaluation, None, episodes)) != seeds_of(expert):
                raise SystemExit(f"error: {task} {policy} was evaluated on other seeds than the expert")
            seconds = {stage: clock.seconds.get(key, 0.0) for stage, key in
                       (("collect", "collect"), ("train", f"{policy} train"), ("evaluate", f"{policy} evaluate"))}
            results.append({**policy_result(config, task, index, policy, evaluation, expert, seconds),
                            "measured": {**machine_facts(), "command": command}})
            print(f"{task} {policy}: {percent(results[-1]['policy_success'])}, expert {percent(results[-1]['expert'])}")
            result = publish(config, results)
        copy_videos(config, task, results, result["results"])
    print(section_text(result))
    return result


if __name__ == "__main__":
    main()
