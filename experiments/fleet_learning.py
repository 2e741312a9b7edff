"""The recorded fleet-learning runs: a small seed collection, the fleet learning from its deployment, each round
evaluated as the BC figures it is compared with (issue 44).

    .venv/bin/python -m experiments.fleet_learning                    # pick_place from cameras (rounds resume)
    .venv/bin/python -m experiments.fleet_learning --run-rounds 2     # carry on up to round 2 only
    .venv/bin/python -m experiments.fleet_learning --setting state    # the gates side by side, state MLP
    .venv/bin/python -m experiments.fleet_learning --setting budget   # ... where help is scarce
    .venv/bin/python -m experiments.fleet_learning --deploy-episodes 10 --continuous --help-steps 15000
                                                      # more deployment a round, from the same seed policy
    .venv/bin/python -m experiments.fleet_learning --retrain fresh --round-steps 5000
                                                      # a fresh policy each round, deployed in the next
    .venv/bin/python -m experiments.fleet_learning --retrain fresh --round-epochs 70
                                                      # ... trained for 70 passes over the frames so far
    .venv/bin/python -m experiments.fleet_learning --task push --retrain fresh --action-modes 2 --mode-actions ee_dz \
        --n-action-steps 4                            # a mixture head over the height, 4 actions of a chunk

``--setting`` picks the defaults (``SETTINGS``): ``visuomotor``, the cnn from the front and
wrist cameras and the arm's own state, seeded with docs/scaling.md's 27 x 10 visuomotor point;
``state``, the state MLP from a weak seed (3 x 10), every gate from the same seed policy at
one plentiful budget, cheap enough to set the gates side by side (ROHE over the random gate's);
``budget``, the same where help is scarce: a seed that mostly succeeds (9 x 10), 5 operators
for 50 robots, 600 expert steps a round in hand-overs of 15, and a random gate whose
operators are never idle while the budget lasts (Fleet-DAgger's random allocation).

As a user would run it, each stage a subprocess with its output in a log under ``--out``:

1. ``collect`` the seed demonstrations: robots 0..``--seed-robots``-1 x ``--seed-episodes``
   (visuomotor: front and wrist cameras at 64 px, the same episodes as the 27 x 10 point of
   docs/scaling.md's visuomotor sweep);
2. ``evaluate --expert`` once on the evaluation robots and seeds;
3. ``train/bc.py`` the seed policy on them (round 0; visuomotor: the cnn as that scaling point trains it);
4. per ``--gates`` entry, from a copy of the seed policy, per round r = 1..``--rounds``:
   ``train/fleet_learn.py --stop-after r`` under torchrun (deploy on the ``--fleet-robots``
   robots, help, retrain; the learning rate carries on at the seed schedule's end, 10% of the peak, or
   restarts each round at ``--round-lr``; with ``--retrain fresh`` a new policy trains for ``--round-steps``,
   or ``--round-epochs`` passes over the expert-labelled frames so far where that takes more);
5. ``evaluate`` of the seed policy and of each round's result on robots 0..``--eval-robots``-1
   x ``--eval-episodes`` held-out seeds, as the full runs evaluate (docs/evaluation.md: the
   visuomotor one's 0.954).

A continuous deployment (``--continuous``) is an arm of its own beside the same seed and seed
policy, named for its episodes a robot: ``OUT/GATE_10x_continuous``, with its own results file,
page and plot (``fleet_learning_10x_continuous``); so is ``--retrain fresh``
(``OUT/GATE_fresh``, ``fleet_learning_fresh``; with ``--round-epochs 70``, ``OUT/GATE_fresh_70_epochs``),
``--own-successes``, where the deployed episodes the policy succeeded in alone train too
(``OUT/GATE_fresh_own_successes``), and ``--max-handovers H``, where an episode gets at most H
hand-overs (``OUT/GATE_at_most_H_an_episode``). A policy head other than bc.py's default (``--action-modes``,
``--mode-actions``, ``--n-action-steps``) gets a seed policy and arms of its own, named for it
(``OUT/seed_policy_2_modes_ee_dz_4_action_steps``, ``OUT/stall_fresh_2_modes_ee_dz_4_action_steps``).

Everything resumes: the collection carries on, fleet_learn.py does, a finished evaluation is
kept. The results (accounts and evaluations per round) go to ``--results-dir/NAME.json``,
its page into ``--docs/NAME.md`` (experiments/runs/; ``python -m experiments.render``
lists it in experiments/runs/README.md) and the plot (success against expert-labelled frames, with the BC
points of docs/scaling.md and the visuomotor full run) to ``--media``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.files import repo_relative
from core.options import check_choices, check_options, parse_config
from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset.manifest import read_manifest
from experiments.fleet_learning_report import check_results_are_its_own, publish
from experiments.full_run import StageClock, finished_evaluation, trained_step
from train.checkpoint import Checkpoint, latest_checkpoint, open_checkpoint
from train.fleet.accounting import seed_frames
from train.fleet_learn import RETRAIN, check_pretrain_steps, check_round_epochs, fresh_round_steps, round_policy


SETTINGS = {  # the defaults of each --setting
    # the recorded run: the cnn from cameras, seeded with docs/scaling.md's 27 x 10 visuomotor point
    "visuomotor": {"seed_robots": 27, "seed_episodes": 10, "cameras": ("front", "wrist"), "policy": "cnn",
                   "inputs": "proprio+cameras", "hidden": (256, 256), "batch_size": 64, "seed_steps": 2700,
                   "round_steps": 1000, "gates": ("stall",), "operators": 10, "help_steps": 3000,
                   "segment_steps": 40, "random_rate": 0.02},
    # the gates side by side with plentiful help, cheaply: the state MLP from a weak seed (3 robots x 10)
    "state": {"seed_robots": 3, "seed_episodes": 10, "cameras": (), "policy": "mlp", "inputs": "state",
              "hidden": (512, 512, 512), "batch_size": 256, "seed_steps": 500, "round_steps": 500,
              "gates": ("random", "stall", "uncertainty", "fleet"), "operators": 10, "help_steps": 3000,
              "segment_steps": 40, "random_rate": 0.02},
    # the gates side by side where help is scarce, as in Fleet-DAgger: a seed that mostly succeeds (9 robots x
    # 10), 5 operators for 50 robots, 600 expert steps a round in short hand-overs; the random gate's
    # operators are never idle while the budget lasts, each taking a robot at random
    "budget": {"seed_robots": 9, "seed_episodes": 10, "cameras": (), "policy": "mlp", "inputs": "state",
               "hidden": (512, 512, 512), "batch_size": 256, "seed_steps": 900, "round_steps": 500,
               "gates": ("random", "stall", "uncertainty", "fleet"), "operators": 5, "help_steps": 600,
               "segment_steps": 15, "random_rate": 1.0},
}


@dataclass
class FleetLearningConfig:
    setting: str = field(default="visuomotor", metadata={"help": "visuomotor, state or budget: the defaults below"})
    task: str = field(default="pick_place", metadata={"help": "task"})
    seed_robots: int | None = field(default=None, metadata={"help": "robots of the seed collection"})
    seed_episodes: int | None = field(default=None, metadata={"help": "seed demonstrations per robot"})
    cameras: tuple[str, ...] = field(default=(), metadata={"help": "cameras (default: the setting's)"})
    image_size: int = field(default=64, metadata={"help": "camera image size, pixels"})
    policy: str | None = field(default=None, metadata={"help": "policy kind (train/bc.py --policy)"})
    inputs: str | None = field(default=None, metadata={"help": "what the policy sees"})
    hidden: tuple[int, ...] = field(default=(), metadata={"help": "MLP (and cnn head) widths"})
    batch_size: int | None = field(default=None, metadata={"help": "windows per rank per step"})
    ranks: int = field(default=2, metadata={"help": "DDP ranks"})
    seed_steps: int | None = field(default=None, metadata={"help": "training steps on the seed"})
    rounds: int = field(default=6, metadata={"help": "deployment rounds (the schedule spans them all)"})
    run_rounds: int | None = field(default=None, metadata={"help": "stop after this round now (default: all)"})
    round_steps: int | None = field(default=None, metadata={"help": "training steps after each round"})
    retrain: str = field(default="carry", metadata={
        "help": "after each round: carry the policy on or train a fresh one, for --round-steps; "
                "fleet_learn.py --retrain"})
    round_epochs: float = field(default=0.0, metadata={
        "help": "with --retrain fresh: train each round's fresh policy for this many passes over the expert-labelled "
                "frames so far, and at least --round-steps (fleet_learn.py --round-epochs; 0: --round-steps alone)"})
    own_successes: bool = field(default=False, metadata={
        "help": "also train on the deployed episodes the policy succeeded in alone (fleet_learn.py --own-successes)"})
    pretrain_steps: int = field(default=0, metadata={
        "help": "with --retrain fresh and a cnn: pretrain each round's camera encoders this many steps on every "
                "recorded frame so far (fleet_learn.py --pretrain-steps; 0: not)"})
    action_modes: int = field(default=1, metadata={
        "help": "the policy's head (train/bc.py --action-modes): 1 regresses the action chunk, K > 1 fits a mixture "
                "of K modes and acts on the likeliest"})
    mode_actions: tuple[str, ...] = field(default=(), metadata={
        "help": "with --action-modes K > 1: the action dimensions the modes span (train/bc.py --mode-actions)"})
    n_action_steps: int | None = field(default=None, metadata={
        "help": "actions of each chunk executed before the next prediction, in deployment and evaluation "
                "(train/bc.py --n-action-steps; default: the policy's, 8)"})
    round_lr: float = field(default=0.0, metadata={
        "help": "each round restarts the learning rate at this share of the peak (fleet_learn.py --round-lr; 0: it "
                "carries on at the seed schedule's end, 10% of the peak)"})
    gates: tuple[str, ...] = field(default=(), metadata={
        "help": "gates (fleet_learn.py --gate), one run each from the same seed policy"})
    operators: int | None = field(default=None, metadata={"help": "robots helped at most at once"})
    help_steps: int | None = field(default=None, metadata={"help": "expert steps per round"})
    segment_steps: int | None = field(default=None, metadata={"help": "expert steps per hand-over at most"})
    max_handovers: int | None = field(default=None, metadata={
        "help": "hand-overs an episode gets at most (fleet_learn.py --max-handovers; default: no limit)"})
    stall_steps: int | None = field(default=None, metadata={
        "help": "stall gate: steps without progress before a robot asks (fleet_learn.py --stall-steps; default: "
                "its 25)"})
    random_rate: float | None = field(default=None, metadata={
        "help": "random gate: the share of steps a robot asks (1: operators never idle while the budget lasts)"})
    fleet_robots: int = field(default=50, metadata={"help": "robots deployed each round"})
    deploy_episodes: int = field(default=2, metadata={"help": "episodes per deployed robot each round"})
    continuous: bool = field(default=False, metadata={
        "help": "deploy continuously: a robot starts its next episode as soon as one ends (default: in waves)"})
    eval_robots: int = field(default=50, metadata={"help": "robots evaluated (0..N-1, as the full run)"})
    eval_episodes: int = field(default=10, metadata={"help": "held-out episodes per evaluated robot"})
    held_out_robots: int = field(default=30, metadata={
        "help": "also evaluate on robots no seed or round has seen, --fleet-robots on (as docs/scaling.md's held-out "
                "robots; 0: not)"})
    held_out_episodes: int = field(default=5, metadata={"help": "episodes per held-out robot"})
    seed: int = field(default=0, metadata={"help": "fleet seed"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers"})
    out: str = field(default="", metadata={"help": "data, runs, evaluations and logs (default: runs/NAME)"})
    docs: str = field(default="experiments/runs", metadata={"help": "folder of the run's page, NAME.md"})
    media: str = field(default="docs/media", metadata={"help": "where the plot goes"})
    results_dir: str = field(default="experiments/results", metadata={"help": "where NAME.json goes"})
    results_name: str = field(default="", metadata={
        "help": "NAME: the results file's, the page's and the plot's (default: from the setting, task, "
                "deployment and head; a run from another seed needs its own)"})

    def __post_init__(self):
        check_choices(self, {"setting": tuple(SETTINGS), "retrain": RETRAIN})
        for name, default in SETTINGS[self.setting].items():  # options left unset take the setting's value
            if getattr(self, name) in (None, ()):
                setattr(self, name, default)
        self.out = self.out or f"runs/{self.seed_name}"
        check_options(self, ("seed_robots", "seed_episodes", "ranks", "seed_steps", "round_steps", "fleet_robots",
                             "eval_robots", "eval_episodes", "workers"), lambda value: value >= 1,
                      "must be at least 1")
        check_round_epochs(self)
        check_pretrain_steps(self, self.policy)
        check_options(self, ("max_handovers", "stall_steps"), lambda value: value is None or value >= 1,
                      "must be at least 1")
        check_options(self, ("action_modes",), lambda value: value >= 1, "must be at least 1")
        if self.mode_actions and self.action_modes < 2:
            raise ValueError("--mode-actions needs --action-modes 2 or more")
        if self.n_action_steps is not None:
            check_options(self, ("n_action_steps",), lambda value: value >= 1, "must be at least 1")
        self.run_rounds = self.rounds if self.run_rounds is None else min(self.run_rounds, self.rounds)

    @property
    def seed_name(self) -> str:
        """The name of what every deployment schedule shares (the seed, its policy, the expert's evaluation; the
        default ``--out``): ``fleet_learning`` for the recorded (visuomotor) run, else ``fleet_learning_SETTING``;
        ``_TASK`` after it for a task other than pick_place."""
        name = "fleet_learning" if self.setting == "visuomotor" else f"fleet_learning_{self.setting}"
        return name if self.task == "pick_place" else f"{name}_{self.task}"

    @property
    def deployment(self) -> str:
        """How each round deploys and retrains, as a name's suffix: empty in waves, ``_Nx_continuous`` for N
        episodes a robot deployed continuously, and ``hand_overs``; then ``_fresh`` where each round trains a fresh
        policy (``_fresh_E_epochs`` for --round-epochs E, then ``_encoders_pretrained_N_steps`` for
        --pretrain-steps N), and ``_own_successes`` where the policy's own successes train too."""
        fresh = "_fresh" + (f"_{self.round_epochs:g}_epochs" if self.round_epochs else "") + \
            (f"_encoders_pretrained_{self.pretrain_steps}_steps" if self.pretrain_steps else "")
        return (f"_{self.deploy_episodes}x_continuous" if self.continuous else "") + self.hand_overs + \
            (fresh if self.retrain == "fresh" else "") + ("_own_successes" if self.own_successes else "")

    @property
    def hand_overs(self) -> str:
        """``_S_step_hand_overs`` where hand-overs last at most S steps, not the setting's, then
        ``_at_most_H_an_episode`` where an episode gets at most H of them, then ``_after_T_stalled_steps`` where
        the stall gate waits T steps, not its default; else empty."""
        length = f"_{self.segment_steps}_step_hand_overs" \
            if self.segment_steps != SETTINGS[self.setting]["segment_steps"] else ""
        return length + (f"_at_most_{self.max_handovers}_an_episode" if self.max_handovers else "") + \
            (f"_after_{self.stall_steps}_stalled_steps" if self.stall_steps else "")

    @property
    def head(self) -> str:
        """The policy's head and how many actions of a chunk it executes, as a name's suffix: empty for bc.py's
        defaults, else ``_K_modes`` with the dimensions the modes span, and ``_N_action_steps``. The seed policy
        and every arm carry it, so policies of another head never resume each other's checkpoints."""
        modes = f"_{self.action_modes}_modes" + "".join(f"_{name}" for name in self.mode_actions) \
            if self.action_modes > 1 else ""
        return modes + (f"_{self.n_action_steps}_action_steps" if self.n_action_steps else "")

    def round_trained(self, run: Path, round: int) -> bool:
        """Whether ``run`` has finished round ``round``: accounted for it, and trained the round's steps (a fresh
        policy's from the expert-labelled frames the accounts count, as fleet_learn.py does)."""
        accounts = {account["round"]: account for account in run_accounts_of(run)}
        if round not in accounts:
            return False
        steps = fresh_round_steps(self.round_steps, self.round_epochs, accounts[round]["labelled_so_far"],
                                  self.batch_size * self.ranks) if self.retrain == "fresh" else \
            self.seed_steps + round * self.round_steps
        return trained_step(round_policy(run, round)) >= steps

    @property
    def name(self) -> str:
        """The results' name (results file, page, plot): ``--results-name``, else ``seed_name``, the
        ``deployment`` suffix and the ``head``'s."""
        return self.results_name or self.seed_name + self.deployment + self.head


def training_options(config: FleetLearningConfig) -> list[str]:
    """bc.py's options, the same for the seed policy and every round after it."""
    return ["--data", repo_relative(Path(config.out) / "seed"), "--policy", config.policy, "--inputs", config.inputs,
            "--hidden", *map(str, config.hidden), "--batch-size", str(config.batch_size), "--val-fraction", "0",
            "--seed", str(config.seed),
            *(["--action-modes", str(config.action_modes)] if config.action_modes > 1 else []),
            *(["--mode-actions", *config.mode_actions] if config.mode_actions else []),
            *(["--n-action-steps", str(config.n_action_steps)] if config.n_action_steps else [])]


def torchrun(config: FleetLearningConfig, script: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={config.ranks}", script]


def fleet_learn_command(config: FleetLearningConfig, gate: str, run: Path, stop_after: int) -> list[str]:
    return [*torchrun(config, "train/fleet_learn.py"), *training_options(config), "--out", repo_relative(run),
            "--max-steps", str(config.seed_steps), "--rounds", str(config.rounds), "--stop-after", str(stop_after),
            "--round-steps", str(config.round_steps), "--round-lr", str(config.round_lr), "--retrain", config.retrain,
            *(["--round-epochs", str(config.round_epochs)] if config.round_epochs else []),
            *(["--pretrain-steps", str(config.pretrain_steps)] if config.pretrain_steps else []),
            "--gate", gate, "--operators", str(config.operators),
            "--help-steps", str(config.help_steps), "--segment-steps", str(config.segment_steps),
            *(["--max-handovers", str(config.max_handovers)] if config.max_handovers else []),
            *(["--stall-steps", str(config.stall_steps)] if config.stall_steps else []),
            "--random-rate", str(config.random_rate),
            "--fleet-robots", str(config.fleet_robots), "--deploy-episodes", str(config.deploy_episodes),
            *(["--continuous"] if config.continuous else []),
            *(["--own-successes"] if config.own_successes else []), "--workers", str(config.workers)]


def seed_store_frames(store: Path) -> int:
    """Frames of the seed demonstrations (what round 0 is trained on)."""
    return seed_frames(select_episodes(FleetStore.open(store)))


def collected(store: Path, robots: int, episodes: int) -> bool:
    """Whether the collection in ``store`` has attempted every episode of its ``robots`` robots."""
    manifest = read_manifest(store) if store.exists() else None
    entries = (manifest or {}).get("robots", {})
    return len(entries) == robots and all(e["episodes"] + e["failed"] >= episodes for e in entries.values())


def run_accounts_of(run: Path) -> list[dict]:
    """A train/fleet_learn.py run's accounts, a round each (round 0, the seed, included; none before its first)."""
    accounts = run / "fleet" / "accounts.json"
    return json.loads(accounts.read_text())["rounds"] if accounts.exists() else []


def accounted_rounds(run: Path) -> list[int]:
    """The rounds that ``run``'s accounts cover (round 0, the seed, included)."""
    return [account["round"] for account in run_accounts_of(run)]


def evaluated(config: FleetLearningConfig, clock: StageClock, name: str, agent: list[str], out: Path,
              step: int | None = None) -> dict:
    """The evaluations of ``agent`` (of the checkpoint at ``step``; the expert: None) in ``out``, on the evaluation
    robots and on the held-out ones (``out_held_out``): kept where finished, else run now."""
    result = {"step": step}
    for key, robots, episodes, offset in (("fleet", config.eval_robots, config.eval_episodes, 0),
                                          ("held_out", config.held_out_robots, config.held_out_episodes,
                                           config.fleet_robots)):
        if not robots:
            continue
        where = out if key == "fleet" else out.parent / f"{out.name}_held_out"
        command = [sys.executable, "-m", "eval.cli", *agent, "--robots", str(robots), "--episodes", str(episodes),
                   "--robot-offset", str(offset), "--seed", str(config.seed), "--workers", str(config.workers),
                   "--out", repo_relative(where), "--overwrite", "--quiet"]
        clock.run(f"eval_{name}_{key}", f"evaluate {name}" + (" on held-out robots" if offset else ""), command,
                  where.parent / f"{where.name}.log", resumes=False,
                  done=finished_evaluation(where, step, robots * episodes) is not None)
        info = finished_evaluation(where, step, robots * episodes)
        figures = {"fleet": info["fleet"], "per_site": info["per_site"]}
        result.update({**figures, "code_version": info["code_version"]} if key == "fleet" else {"held_out": figures})
    return result


def checkpoint_evaluated(config: FleetLearningConfig, clock: StageClock, name: str, checkpoint: Path, out: Path
                         ) -> dict:
    """``evaluated`` for ``checkpoint`` (a run: its latest)."""
    step = open_checkpoint(checkpoint, quiet=True).step
    return evaluated(config, clock, name, ["--checkpoint", repo_relative(checkpoint)], out, step)


def round_checkpoint(run: Path, round: int) -> Path:
    """The checkpoint ``run`` reached at the end of round ``round``: the copy that drove the next round, or,
    for the last round so far, the latest of the run (or of the round's fresh policy)."""
    driven = run / "fleet" / f"round_{round + 1}_policy"
    return driven if driven.exists() else round_policy(run, round)


def arm_directory(config: FleetLearningConfig, gate: str) -> Path:
    """Where one gate's run, deployed as ``config`` deploys, lives beside the seed: ``OUT/GATE`` and the
    deployment and head suffixes (``OUT/stall_10x_continuous``, ``OUT/stall_fresh_2_modes_ee_dz``)."""
    return Path(config.out) / f"{gate}{config.deployment}{config.head}"


def run_gate(config: FleetLearningConfig, gate: str, clock: StageClock, seed_policy: Path) -> list[dict]:
    """Every round of one gate's run up to ``run_rounds``, each evaluated; the evaluations' summaries.
    The run starts from a copy of the seed policy's last checkpoint."""
    out = arm_directory(config, gate)
    run = out / "run"
    if not run.exists():
        out.mkdir(parents=True, exist_ok=True)
        Checkpoint.read(latest_checkpoint(seed_policy), training=True).save(run, keep=1)
    evaluations = []
    for round in range(1, config.run_rounds + 1):
        clock.run(f"{out.name}_round_{round}", f"{out.name}: round {round}",
                  fleet_learn_command(config, gate, run, round), out / f"round_{round}.log",
                  done=config.round_trained(run, round))
        evaluations.append({"round": round, **checkpoint_evaluated(config, clock, f"{out.name}_round_{round}",
                                                                   round_checkpoint(run, round),
                                                                   out / f"eval_round_{round}")})
    return evaluations


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(FleetLearningConfig, __doc__, argv)
    check_results_are_its_own(asdict(config), config.name, Path(config.results_dir))
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    clock = StageClock(out / "seconds.json")
    seed_store = out / "seed"
    clock.run("collect", "collect the seed",
              [sys.executable, "-m", "collect.cli", "--task", config.task, "--robots", str(config.seed_robots),
               "--episodes", str(config.seed_episodes), "--seed", str(config.seed),
               *(["--cameras", *config.cameras, "--image-size", str(config.image_size)] if config.cameras else []),
               "--workers", str(config.workers),
               "--out", repo_relative(seed_store), "--quiet"], out / "collect.log",
              done=collected(seed_store, config.seed_robots, config.seed_episodes))
    expert = evaluated(config, clock, "the expert", ["--expert", "--task", config.task], out / "eval_expert")
    seed_policy = out / f"seed_policy{config.head}"
    clock.run(seed_policy.name, "train the seed policy",
              [*torchrun(config, "train/bc.py"), *training_options(config), "--out", repo_relative(seed_policy),
               "--max-steps", str(config.seed_steps)], out / f"{seed_policy.name}.log", resumes=seed_policy.exists(),
              done=trained_step(seed_policy) == config.seed_steps)
    seed_evaluation = {"round": 0, **checkpoint_evaluated(config, clock, seed_policy.name, seed_policy,
                                                          out / f"eval_{seed_policy.name}")}
    runs = {}
    for gate in config.gates:
        evaluations = [seed_evaluation, *run_gate(config, gate, clock, seed_policy)] if config.run_rounds else \
            [seed_evaluation]
        accounts = run_accounts_of(arm_directory(config, gate) / "run") or \
            [{"round": 0, "labelled_so_far": seed_store_frames(seed_store)}]
        runs[gate] = {"evaluations": evaluations, "accounts": accounts}
    command = "python -m experiments.fleet_learning" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    return publish(config, command, expert, runs, clock.seconds)


if __name__ == "__main__":
    main()
