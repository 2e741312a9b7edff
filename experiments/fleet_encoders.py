"""A fleet-learning run's frames trained again, the cnn's encoders pretrained on everything the fleet recorded.

    python -m experiments.fleet_encoders --fleet-run runs/fleet_learning_push_5x10/ARM/run --rounds 4 \\
        --data runs/fleet_learning_push_5x10/seed --action-modes 2 --mode-actions ee_dz --n-action-steps 4 \\
        --seeds 0 1 --out runs/fleet_retrain/push_5x10_rounds_4_encoders

Stages, each kept where it finished (a rerun carries on):

1. ``train.encoder_pretrain`` on the seed (--data) and every frame of rounds 1..--rounds, expert-labelled or not,
   into --encoders (default OUT_pretrained);
2. for each training seed S, ``experiments.fleet_retrain`` on the seed demonstrations and the expert's labels of
   those rounds, as the run trains a round's fresh policy (2,000 steps, batch 64 on 2 ranks), its encoders started
   from stage 1 (``--init-encoders``), into OUT_seedS;
3. each policy evaluated as experiments/fleet_learning.py evaluates a round: robots 0..49 x 10 held-out episodes
   and held-out robots 50..79 x 5, into OUT_seedS_eval and OUT_seedS_eval_held_out; the expert beside, on the same
   robots and seeds, into OUT_expert.

Writes experiments/results/NAME.json (--results-dir, --results-name): each seed's success with its 95% interval, per site, on
held-out robots, their mean, the expert-labelled frames (the run's accounts at --rounds), the command, and the goal's
measure: the frames behaviour cloning needs for the seeds' mean success over the expert (its curve with the policy's
head and acting, experiments/fleet_learning_report.py) and the policies' frames as a share of them.
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
from experiments.fleet_learning import FleetLearningConfig, accounted_rounds, evaluated, run_accounts_of
from experiments.fleet_learning_report import bc_bracket, bc_frames_for, bc_points, goal_curve
from experiments.full_run import StageClock, trained_step
from train.encoder_pretrain import DESCRIPTION, RESUME
from train.fleet_learn import round_directory

EVALUATION = FleetLearningConfig()  # how a fleet-learning round is evaluated: robots 0..49 x 10, held-out 50..79 x 5


@dataclass
class FleetEncodersConfig:
    fleet_run: str = field(default="", metadata={"help": "a train/fleet_learn.py run (its --out)"})
    rounds: int = field(default=1, metadata={"help": "its rounds 1..N: their labels train, all their frames pretrain"})
    data: str = field(default="", metadata={"help": "the run's seed collection"})
    action_modes: int = field(default=1, metadata={"help": "the policy's head, as the run's (bc.py --action-modes)"})
    mode_actions: tuple[str, ...] = field(default=(), metadata={"help": "as the run's (bc.py --mode-actions)"})
    n_action_steps: int | None = field(default=None, metadata={"help": "actions of a chunk executed, evaluating"})
    steps: int = field(default=2000, metadata={"help": "training steps of each policy (a fresh round's)"})
    pretrain_steps: int = field(default=1500, metadata={"help": "train.encoder_pretrain --steps"})
    seeds: tuple[int, ...] = field(default=(0,), metadata={"help": "training seeds"})
    encoders: str = field(default="", metadata={"help": "where the pretrained encoders go (default: OUT_pretrained)"})
    out: str = field(default="runs/fleet_encoders", metadata={"help": "prefix of each seed's run and evaluations"})
    results_name: str = field(default="fleet_encoders", metadata={"help": "RESULTS_DIR/NAME.json"})
    results_dir: str = field(default="experiments/results", metadata={"help": "where NAME.json goes"})

    def __post_init__(self):
        if missing := [r for r in range(1, self.rounds + 1) if r not in accounted_rounds(Path(self.fleet_run))]:
            raise ValueError(f"--fleet-run {self.fleet_run or '(none)'} has not finished round {missing[0]}")
        self.encoders = self.encoders or f"{self.out}_pretrained"


def cnn_options(config, seed: int, val_fraction: float = 0.0) -> list[str]:
    """bc.py's options for a cnn as a fresh fleet-learning round trains it (batch 64, hidden 256 256, no EMA),
    with ``config``'s head, steps and pretrained encoders if it names them (this module's config or bc_encoders')."""
    return ["--policy", "cnn", "--inputs", "proprio+cameras", "--hidden", "256", "256", "--batch-size", "64",
            "--val-fraction", str(val_fraction), "--seed", str(seed), "--max-steps", str(config.steps),
            "--ema-decay", "0", *(["--action-modes", str(config.action_modes)] if config.action_modes > 1 else []),
            *(["--mode-actions", *config.mode_actions] if config.mode_actions else []),
            *(["--init-encoders", config.encoders] if config.encoders else [])]


def pretrain_stage(clock: StageClock, encoders: str, options: list[str]) -> None:
    """``train.encoder_pretrain`` with ``options`` into ``encoders``, unless it finished there (a crashed one
    carries on from its resume state, and its seconds add up)."""
    clock.run("pretrain", "pretrain the encoders",
              [sys.executable, "-m", "train.encoder_pretrain", *options, "--out", encoders], Path(f"{encoders}.log"),
              resumes=(Path(encoders) / RESUME).exists(), done=(Path(encoders) / DESCRIPTION).exists())


def seed_result(config: FleetEncodersConfig, clock: StageClock, seed: int) -> dict:
    """Train (unless trained) and evaluate (unless evaluated) the policy of training seed ``seed``; its figures."""
    run = Path(f"{config.out}_seed{seed}")
    clock.run(f"train_seed{seed}", f"train seed {seed}",
              [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "experiments.fleet_retrain", "--fleet-run", config.fleet_run, "--rounds", str(config.rounds),
               "--data", config.data, *cnn_options(config, seed), "--out", str(run)],
              Path(f"{run}.log"), resumes=trained_step(run) is not None, done=trained_step(run) == config.steps)
    n_action_steps = ["--n-action-steps", str(config.n_action_steps)] if config.n_action_steps else []
    return {"seed": seed, "checkpoint": repo_relative(run),
            **evaluated(EVALUATION, clock, f"seed{seed}", ["--checkpoint", str(run), *n_action_steps],
                        Path(f"{run}_eval"), config.steps)}


def expert_evaluated(clock: StageClock, task: str, out: Path) -> dict:
    """The task's expert evaluated as the policies are, on the same robots and seeds, into ``out`` (kept where
    finished)."""
    return evaluated(EVALUATION, clock, "the expert", ["--expert", "--task", task], out)


def behaviour_cloning_curve(config: FleetEncodersConfig, seed: FleetStore) -> list[dict]:
    """Behaviour cloning's points that the goal reads ``config``'s policies against: its curve on the ``seed``
    collection's task from cameras with their head and acting (a full-run point's frames estimated from the seed's
    demonstrations)."""
    demonstrations = select_episodes(seed)
    return goal_curve(bc_points(seed.manifest["task"]["reference"],
                                sum(episode.length for episode in demonstrations) / len(demonstrations), "visuomotor",
                                config.action_modes, config.mode_actions, config.n_action_steps))


def goal_measure(over_expert: float, frames: int, curve: list[dict]) -> dict:
    """The goal's measure of policies at ``over_expert`` (the mean of their seeds' success over the expert's) from
    ``frames`` expert-labelled frames: the frames behaviour cloning needs for it on ``curve``, and ``frames`` as a
    share of them, and the two measured BC points they lie between (all None off the curve)."""
    needed = bc_frames_for(over_expert, curve)
    bracket = bc_bracket(over_expert, curve)
    return {"over_expert": round(over_expert, 4), "bc_frames": needed and round(needed),
            "share_of_bc": needed and round(frames / needed, 4),
            "bc_bracket": bracket and [round(point["frames"]) for point in bracket]}


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(FleetEncodersConfig, __doc__, argv)
    clock = StageClock(Path(f"{config.out}_seconds.json"))
    rounds = [repo_relative(round_directory(Path(config.fleet_run), r)) for r in range(1, config.rounds + 1)]
    pretrain_stage(clock, config.encoders,
                   ["--data", config.data, "--more", *rounds, "--steps", str(config.pretrain_steps)])
    seeds = [seed_result(config, clock, seed) for seed in config.seeds]
    labelled = {account["round"]: account["labelled_so_far"] for account in run_accounts_of(Path(config.fleet_run))}
    seed_store = FleetStore.open(config.data)
    expert = expert_evaluated(clock, seed_store.manifest["task"]["reference"], Path(f"{config.out}_expert"))
    mean_success = sum(s["fleet"]["pc_success"] for s in seeds) / len(seeds)
    goal = goal_measure(mean_success / expert["fleet"]["pc_success"], labelled[config.rounds],
                        behaviour_cloning_curve(config, seed_store))
    result = {"config": asdict(config), "machine": machine_facts(), "seconds": clock.seconds,
              "command": "python -m experiments.fleet_encoders" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
              "expert_labelled_frames": labelled[config.rounds],
              "encoders": json.loads((Path(config.encoders) / DESCRIPTION).read_text()),
              "seeds": seeds, "mean_success": mean_success,
              "mean_held_out": sum(s["held_out"]["fleet"]["pc_success"] for s in seeds) / len(seeds),
              "expert": expert, "goal": goal}
    write_results(config.results_name, result, Path(config.results_dir))
    for seed in seeds:
        print(f"seed {seed['seed']}: {seed['fleet']['pc_success']:.1f}% {seed['fleet']['ci95']}, "
              f"held-out robots {seed['held_out']['fleet']['pc_success']:.1f}%")
    print(f"mean {result['mean_success']:.1f}% from {result['expert_labelled_frames']:,} expert-labelled frames"
          + (f": {goal['share_of_bc']:.1%} of the {goal['bc_frames']:,} behaviour cloning needs for it"
             + (f" (between its measured {goal['bc_bracket'][0]:,} and {goal['bc_bracket'][1]:,})"
                if goal.get("bc_bracket") else "")
             if goal["bc_frames"] else ", off behaviour cloning's curve"))
    return result


if __name__ == "__main__":
    main()
