"""Behaviour cloning from camera encoders pretrained on its own demonstrations: fleet_encoders' like for like.

    python -m experiments.bc_encoders --data runs/bc_push_50x20_mix_dz/push/data --episodes-per-robot 10 \\
        --action-modes 2 --mode-actions ee_dz --n-action-steps 4 --out runs/bc_encoders/push_50x10 \\
        --results-name bc_encoders_push_50x10

experiments/fleet_encoders.py pretrains a fleet-learning policy's encoders on every frame the fleet recorded, most of
them unlabelled. Behaviour cloning can pretrain the same way on its demonstrations; this measures whether that moves
its curve; with ``--pretrain-steps 0`` it measures a point of behaviour cloning's own curve, from random encoders.
Stages, each kept where it finished (a rerun carries on):

1. ``train.encoder_pretrain`` on the demonstrations behaviour cloning trains on (each robot's first
   --episodes-per-robot of --data), into --encoders (default OUT_pretrained); none with --pretrain-steps 0;
2. ``train/bc.py`` on them for --steps under 2 ranks, its encoders started from stage 1 (or random), into OUT, as
   the full run trains the cnn (batch 64, hidden 256 256, no EMA);
3. evaluated as experiments/fleet_learning.py evaluates a round: robots 0..49 x 10 held-out episodes and held-out
   robots 50..79 x 5, into OUT_eval and OUT_eval_held_out.

The expert is evaluated on the same robots and seeds (OUT_expert). Writes experiments/results/NAME.json
(--results-dir, --results-name): the demonstrations and frames, the encoders' record, the evaluations, and a
``bc_curve`` point. A point from pretrained encoders is marked ``"encoders": "pretrained"``, which
experiments/fleet_learning_report.py keeps apart from behaviour cloning's curve from random encoders.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.common import machine_facts, write_results
from core.files import repo_relative
from core.options import parse_config
from dataset import FleetStore
from dataset.episodes import select_episodes
from experiments.fleet_encoders import EVALUATION, cnn_options, expert_evaluated, pretrain_stage
from experiments.fleet_learning import evaluated
from experiments.full_run import StageClock, trained_step
from train.encoder_pretrain import DESCRIPTION
from train.policies.options import PolicyOptions


@dataclass
class BCEncodersConfig:
    data: str = field(default="", metadata={"help": "the demonstrations (a collect store)"})
    episodes_per_robot: int = field(default=0, metadata={
        "help": "each robot's first N demonstrations pretrain and train (0: all of them)"})
    action_modes: int = field(default=1, metadata={"help": "the policy's head (bc.py --action-modes)"})
    mode_actions: tuple[str, ...] = field(default=(), metadata={"help": "bc.py --mode-actions"})
    n_action_steps: int | None = field(default=None, metadata={"help": "actions of a chunk executed, evaluating"})
    steps: int = field(default=5000, metadata={"help": "bc.py --max-steps (the full run's 5,000)"})
    val_fraction: float = field(default=0.0, metadata={"help": "bc.py --val-fraction (the full run's 0.05)"})
    pretrain_steps: int = field(default=1500, metadata={
        "help": "train.encoder_pretrain --steps (0: none; the encoders start random, a point of behaviour cloning's "
                "own curve)"})
    seed: int = field(default=0, metadata={"help": "training seed"})
    encoders: str = field(default="", metadata={"help": "where the pretrained encoders go (default: OUT_pretrained)"})
    out: str = field(default="runs/bc_encoders", metadata={"help": "the bc.py run; its evaluations beside it"})
    results_name: str = field(default="bc_encoders", metadata={"help": "RESULTS_DIR/NAME.json"})
    results_dir: str = field(default="experiments/results", metadata={"help": "where NAME.json goes"})

    def __post_init__(self):
        if not self.data or not Path(self.data).is_dir():
            raise ValueError(f"--data {self.data or '(none)'} is not a collect store")
        if self.pretrain_steps < 0:
            raise ValueError(f"--pretrain-steps {self.pretrain_steps} is negative (0: no pretraining)")
        if self.pretrain_steps == 0 and self.encoders:
            raise ValueError("--encoders needs --pretrain-steps above 0")
        if self.pretrain_steps:
            self.encoders = self.encoders or f"{self.out}_pretrained"


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(BCEncodersConfig, __doc__, argv)
    clock, run = StageClock(Path(f"{config.out}_seconds.json")), Path(config.out)
    per_robot = ["--episodes-per-robot", str(config.episodes_per_robot)] if config.episodes_per_robot else []
    if config.encoders:  # set exactly when --pretrain-steps is above 0
        pretrain_stage(clock, config.encoders, ["--data", config.data, *per_robot,
                                                "--steps", str(config.pretrain_steps), "--seed", str(config.seed)])
    clock.run("train", "train behaviour cloning",
              [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train/bc.py",
               "--data", config.data, *per_robot, *cnn_options(config, config.seed, config.val_fraction),
               "--out", str(run)],
              Path(f"{run}.log"), resumes=trained_step(run) is not None, done=trained_step(run) == config.steps)
    n_action_steps = ["--n-action-steps", str(config.n_action_steps)] if config.n_action_steps else []
    evaluation = evaluated(EVALUATION, clock, "bc", ["--checkpoint", str(run), *n_action_steps],
                           Path(f"{run}_eval"), config.steps)
    store = FleetStore.open(config.data)
    task = store.manifest["task"]["reference"]
    expert = expert_evaluated(clock, task, Path(f"{run}_expert"))
    demonstrations = select_episodes(store, per_robot=config.episodes_per_robot or None)
    frames = sum(episode.length for episode in demonstrations)
    command = "python -m experiments.bc_encoders" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    point = {"task": task, "inputs": "visuomotor", "action_modes": config.action_modes,
             "mode_actions": list(config.mode_actions),
             "n_action_steps": config.n_action_steps or PolicyOptions.n_action_steps,
             "demos": len(demonstrations), "frames": frames, "seed": config.seed,
             **({"encoders": "pretrained"} if config.encoders else {}),
             "over_expert": round(evaluation["fleet"]["pc_success"] / expert["fleet"]["pc_success"], 4),
             "command": command}
    result = {"config": asdict(config), "machine": machine_facts(), "seconds": clock.seconds, "command": command,
              "checkpoint": repo_relative(run), "demonstrations": len(demonstrations), "frames": frames,
              "encoders": json.loads((Path(config.encoders) / DESCRIPTION).read_text()) if config.encoders else "random",
              **evaluation,
              "expert": expert, "bc_curve": [point]}
    write_results(config.results_name, result, Path(config.results_dir))
    print(f"behaviour cloning from {'pretrained' if config.encoders else 'random'} encoders, "
          f"{len(demonstrations):,} demonstrations ({frames:,} frames): "
          f"{evaluation['fleet']['pc_success']:.1f}% {evaluation['fleet']['ci95']}, held-out robots "
          f"{evaluation['held_out']['fleet']['pc_success']:.1f}%")
    return result


if __name__ == "__main__":
    main()
