"""Fleet learning: the fleet learns from its own deployment, on a budget of expert help.

    python train/fleet_learn.py --data data/seed --out runs/fleet --rounds 3 --gate fleet
    torchrun --standalone --nproc_per_node=2 train/fleet_learn.py --data data/seed --out runs/fleet \\
        --policy cnn --rounds 3 --operators 5 --help-steps 3000 --fleet-robots 50

Round 0 trains the policy on the seed demonstrations (--data) for --max-steps, as bc.py
does (OUT may already hold a bc.py run on them: it carries on). Then each round r:

1. **deploys** the latest checkpoint (kept as OUT/fleet/round_r_policy) on robots
   0..--fleet-robots-1 of the seed collection's fleet, --deploy-episodes each, from the
   policy's own inputs (train/fleet/deploy.py). --operators operators watch the fleet, each a
   fixed group of robots stepped in lockstep, and take a robot over when --gate asks: the
   task's scripted expert drives it for up to --segment-steps steps, within --help-steps
   expert steps per round in all (train/fleet/operators.py, gates.py). Every episode goes into
   the round's store OUT/fleet/round_r, with who acted at each frame;
2. **retrains** --round-steps more, under DDP as bc.py, on the seed demonstrations plus every
   frame the expert labelled so far (train/fleet/labels.py), continuing the learning-rate
   schedule over all the steps. With --retrain fresh, a new policy trains instead, from
   initialisation for --round-steps on the same data, in OUT/fleet/round_r_trained: the next
   round deploys it (with --round-epochs, for that many passes over the expert-labelled frames
   so far, if that takes more steps). With --own-successes, the deployed episodes the policy
   succeeded in alone train too, its own actions the targets: they cost no expert frame. With
   --pretrain-steps N (a cnn, --retrain fresh), rank 0 first pretrains the fresh policy's
   camera encoders for N steps on every frame recorded so far, the seed store's and every
   round's, whoever acted (train/encoder_pretrain.py, which resumes after a crash), in
   OUT/fleet/round_r_encoders: they need no expert label;
3. **accounts** for it: OUT/fleet/accounts.json and a table (train/fleet/accounting.py):
   expert-labelled frames with the seed's, deployment success, autonomy, hand-overs, ROHE.

``--gate dagger`` has the expert label every state the policy visits without acting (the
label-hungry upper bound); ``--gate bc`` spends the same steps on whole demonstrations.
Rank 0 deploys while the other ranks wait. Rerunning the command carries on where it
stopped; a finished round is not redone. ``evaluate --checkpoint OUT`` measures the policy
(``--checkpoint OUT/fleet/round_r_trained`` round r's fresh one) on held-out seeds
(experiments/fleet_learning.py does so after every round). docs/fleet_learning.md is the guide.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from train.restarts import end_if_failed_before

if __name__ == "__main__":  # a torchrun restart of inputs that failed before ends here, before torch loads (seconds)
    end_if_failed_before(sys.argv[1:])

import torch.distributed as dist  # noqa: E402

from collect.config import CollectConfig
from core.errors import crash_point, fail, quiet_closed_pipes
from core.files import repo_relative, write_json_atomic
from core.lock import output_lock
from core.options import check_choices, check_options, parse_config
from dataset import FleetStore
from dataset.manifest import MANIFEST, read_manifest
from sim.tasks import recorded_task
from train.bc import join_process_group, one_line_errors, run_training
from train.checkpoint import latest_checkpoint, open_checkpoint
from train.config import TrainConfig, plugin_task_option
from train.data import open_training_store, selected_episodes
from train.fleet.accounting import format_accounts, run_accounts, seed_frames
from train.fleet.deploy import Help, deploy_round
from train.fleet.gates import MODES, GateOptions
from train.fleet.labels import DeploymentLabels
from train.state import check_resumable

ROUND_TIMEOUT = timedelta(hours=2)  # how long the other ranks wait for rank 0's deployment
RETRAIN = ("carry", "fresh")


@dataclass
class FleetLearnConfig(TrainConfig, GateOptions):
    out: str = field(default="runs/fleet", metadata={"help": "run directory: checkpoints, round stores, accounts"})
    rounds: int = field(default=3, metadata={"help": "deployment rounds after the first --max-steps"})
    gate: str = field(default="fleet", metadata={
        "help": f"who asks for help: {', '.join(MODES[:-2])}; or dagger (the expert labels every state, never "
                "acts) or bc (the help buys whole demonstrations)"})
    operators: int = field(default=5, metadata={"help": "robots helped at most at once across the fleet"})
    help_steps: int = field(default=2000, metadata={"help": "expert-acted control steps per round, fleet-wide"})
    segment_steps: int = field(default=30, metadata={"help": "expert steps a hand-over lasts at most"})
    min_segment_steps: int | None = field(default=None, metadata={
        "help": "hand a robot back as soon as its gate no longer asks, once this many expert steps are done "
                "(default: after --segment-steps)"})
    max_handovers: int | None = field(default=None, metadata={
        "help": "hand-overs an episode gets at most; past them the robot carries on alone (default: no limit)"})
    fleet_robots: int = field(default=50, metadata={"help": "robots deployed: 0..N-1 of the seed collection's fleet"})
    deploy_episodes: int = field(default=2, metadata={"help": "episodes per robot each round"})
    continuous: bool = field(default=False, metadata={
        "help": "a robot starts its next episode as soon as one ends (default: in waves, each robot's next episode "
                "starts when the last of its operator's robots has ended)"})
    round_steps: int = field(default=1000, metadata={"help": "training steps after each round"})
    retrain: str = field(default="carry", metadata={
        "help": "after each round: carry (the policy trains --round-steps more) or fresh (a new policy trains from "
                "initialisation for --round-steps on the seed and every label so far, in OUT/fleet/round_R_trained)"})
    round_epochs: float = field(default=0.0, metadata={
        "help": "with --retrain fresh: train each round's fresh policy for this many passes over its expert-labelled "
                "frames, the seed's and every round's so far, at the global batch (batch size x ranks x grad "
                "accumulation), and at least --round-steps; 0: --round-steps alone"})
    pretrain_steps: int = field(default=0, metadata={
        "help": "with --retrain fresh and a cnn: pretrain each round's fresh policy's camera encoders for this many "
                "steps by inverse dynamics on every frame recorded so far, the seed's and every round's "
                "(train/encoder_pretrain.py; 0: they start at random, or from --init-encoders)"})
    pretrain_batch_size: int = field(default=128, metadata={"help": "frame pairs per pretraining step"})
    own_successes: bool = field(default=False, metadata={
        "help": "also train on the deployed episodes the policy succeeded in without help, its own actions the "
                "targets (they cost no expert frame)"})
    round_lr: float = field(default=0.0, metadata={
        "help": "each round's training restarts the learning rate at this share of --lr and decays it to 10% by "
                "the round's end (0: the rate carries on along one schedule over all the rounds)"})
    stop_after: int | None = field(default=None, metadata={
        "help": "stop after this round's training (default: after --rounds); the schedule still spans --rounds, "
                "so a run evaluated round by round learns as one that runs through"})
    task: str | None = plugin_task_option()
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers for the deployment"})
    scheduler: str | None = field(default=None, metadata={"help": "address of an existing dask scheduler"})

    def __post_init__(self):
        super().__post_init__()
        GateOptions.__post_init__(self)
        check_choices(self, {"gate": MODES, "retrain": RETRAIN})
        if self.own_successes and self.gate == "dagger":
            raise ValueError("--own-successes: with --gate dagger the expert labels every deployed frame already")
        check_round_epochs(self)
        check_pretrain_steps(self, self.policy.policy)
        check_options(self, ("rounds",), lambda value: value >= 1, "must be at least 1 (bc.py trains without rounds)")
        check_options(self, ("stop_after",), lambda value: value is None or 0 <= value <= self.rounds,
                      f"must be a round from 0 to --rounds {self.rounds}")
        check_options(self, ("round_lr",), lambda value: 0.0 <= value <= 1.0, "must be in [0, 1]")
        check_options(self, ("operators", "help_steps", "segment_steps", "fleet_robots", "deploy_episodes",
                             "round_steps", "pretrain_batch_size", "workers"), lambda value: value >= 1,
                      "must be at least 1")

        self.help()  # its checks, before anything trains

    def help(self) -> Help:
        """How the rounds' deployments are helped."""
        return Help(self.gate, self.gate_options(), self.segment_steps, self.operators, self.continuous,
                    self.min_segment_steps, self.max_handovers)

    @property
    def total_steps(self) -> int:
        """The steps the learning-rate schedule of the run's own policy spans (the seed's alone with --retrain
        fresh)."""
        return self.optim.max_steps + (self.rounds * self.round_steps if self.retrain == "carry" else 0)


def check_round_epochs(config) -> None:
    """--round-epochs' checks, for a config with ``round_epochs`` and ``retrain`` (experiments/fleet_learning.py's
    too): not negative, and with --retrain fresh only."""
    check_options(config, ("round_epochs",), lambda value: value >= 0, "must not be negative")
    if config.round_epochs and config.retrain != "fresh":
        raise ValueError("--round-epochs: with --retrain carry each round trains --round-steps more; "
                         "it sizes --retrain fresh's policies")


def check_pretrain_steps(config, policy: str) -> None:
    """--pretrain-steps' checks, for a config with ``pretrain_steps`` and ``retrain`` and a ``policy`` kind
    (experiments/fleet_learning.py's too): not negative, with --retrain fresh and a cnn only."""
    check_options(config, ("pretrain_steps",), lambda value: value >= 0, "must not be negative")
    if config.pretrain_steps and config.retrain != "fresh":
        raise ValueError("--pretrain-steps: encoders are pretrained for --retrain fresh's policies, which start anew")
    if config.pretrain_steps and policy != "cnn":
        raise ValueError(f"--pretrain-steps pretrains a cnn's camera encoders; the {policy} policy has none "
                         "(use --policy cnn)")


def fresh_round_steps(round_steps: int, round_epochs: float, labelled_frames: int, global_batch: int) -> int:
    """The steps a round's fresh policy trains (--retrain fresh): ``round_epochs`` passes over ``labelled_frames``
    at ``global_batch`` windows a step (batch size x ranks x grad accumulation), rounded up, and at least
    ``round_steps`` (``round_steps`` alone where ``round_epochs`` is 0)."""
    return max(round_steps, math.ceil(round_epochs * labelled_frames / global_batch))


def round_directory(run: Path, round: int) -> Path:
    return Path(run) / "fleet" / f"round_{round}"


def fresh_directory(run: Path, round: int) -> Path:
    """Where --retrain fresh trains round ``round``'s policy."""
    return Path(run) / "fleet" / f"round_{round}_trained"


def encoders_directory(run: Path, round: int) -> Path:
    """Where --pretrain-steps pretrains round ``round``'s encoders."""
    return Path(run) / "fleet" / f"round_{round}_encoders"


def round_policy(run: Path, round: int) -> Path:
    """The run whose latest checkpoint is the policy after round ``round``'s training (round 0: the seed's):
    the round's fresh policy where --retrain fresh trained one, else the run itself."""
    fresh = fresh_directory(run, round)
    return fresh if round and fresh.exists() else Path(run)


def deployed(path: Path, config: FleetLearnConfig) -> bool:
    """Whether the round's store at ``path`` holds every episode it is to hold (then it is not redone)."""
    manifest = read_manifest(path) if path.exists() else None
    robots = (manifest or {}).get("robots", {})
    return len(robots) == config.fleet_robots and all(
        entry.get("episodes") == config.deploy_episodes for entry in robots.values())


def deploy(config: FleetLearnConfig, store: FleetStore, round: int) -> None:
    """Round ``round``'s deployment of the run's latest checkpoint, into its store (rank 0)."""
    run, out = Path(config.out), round_directory(Path(config.out), round)
    if deployed(out, config):
        print(f"round {round}: deployed already ({out})")
        return
    policy = out.parent / f"round_{round}_policy"
    if not policy.exists():  # the policy that drives this round, whatever trains later
        out.parent.mkdir(parents=True, exist_ok=True)
        open_checkpoint(latest_checkpoint(round_policy(run, round - 1))).write(policy)
    data = store.manifest["data_config"]
    collection = CollectConfig(robots=config.fleet_robots, episodes=config.deploy_episodes,
                               task=store.manifest["task"]["reference"], out=str(out), seed=data["seed"],
                               cameras=tuple(data["cameras"]), image_size=data["image_size"], keep_failures=True,
                               workers=config.workers, scheduler=config.scheduler)
    help = config.help()
    lineage = {"source": "fleet", "policy": repo_relative(policy), "trained_on": repo_relative(store.path)}
    print(f"round {round}: deploying {repo_relative(policy)} on {config.fleet_robots} robots x "
          f"{config.deploy_episodes} episodes; gate {config.gate}, {config.operators} operators, "
          f"{config.help_steps} expert steps", flush=True)
    try:
        summary = deploy_round(collection, str(policy), round, help, config.help_steps, lineage)
    except ValueError as error:
        fail(f"round {round}: {error}")
    print(summary.format())


def accounts_so_far(config: FleetLearnConfig, store: FleetStore, rounds: list[FleetStore]) -> list[dict]:
    """The run's accounts (train/fleet/accounting.py) after ``rounds``: the seed's episodes that train, from
    ``store``, then each round's."""
    return run_accounts(seed_frames(selected_episodes(store, config.data)), rounds)


def write_accounts(config: FleetLearnConfig, accounts: list[dict]) -> None:
    """OUT/fleet/accounts.json and its table on the console."""
    (Path(config.out) / "fleet").mkdir(parents=True, exist_ok=True)
    write_json_atomic(Path(config.out) / "fleet" / "accounts.json",
                      {"config": dataclasses.asdict(config), "rounds": accounts})
    print(format_accounts(accounts))


def trained_to(run: Path) -> int:
    """The step of the run's latest checkpoint (0 before the first)."""
    latest = latest_checkpoint(run)
    return open_checkpoint(latest, quiet=True).step if latest else 0


def pretrain_round_encoders(config: FleetLearnConfig, rounds: list[FleetStore]) -> Path:
    """Round ``len(rounds)``'s pretrained encoders (--pretrain-steps), on every frame of the seed store and of
    ``rounds``: rank 0 pretrains them unless they are there, while the other ranks wait."""
    from train.encoder_pretrain import DESCRIPTION, EncoderPretrainConfig, pretrain  # torchvision: cnn runs only

    out = encoders_directory(Path(config.out), len(rounds))
    if (not dist.is_initialized() or dist.get_rank() == 0) and not (out / DESCRIPTION).exists():
        print(f"round {len(rounds)}: pretraining the camera encoders {config.pretrain_steps:,} steps on every "
              f"recorded frame, the seed's and {len(rounds)} round(s)'", flush=True)
        pretrain(EncoderPretrainConfig(data=config.data.data, more=tuple(str(store.path) for store in rounds),
                                       out=str(out), steps=config.pretrain_steps,
                                       batch_size=config.pretrain_batch_size,
                                       vision_backbone=config.policy.cnn.vision_backbone, seed=config.seed))
        crash_point("fleet-pretrained")
    if dist.is_initialized():
        dist.barrier()
    return out


def train_fresh(config: FleetLearnConfig, rounds: list[FleetStore], labels: DeploymentLabels, labelled: int) -> None:
    """Round ``len(rounds)``'s fresh policy (--retrain fresh), unless it is trained: --round-steps, or with
    --round-epochs as many passes over the ``labelled`` expert-labelled frames so far, if that takes more; from
    encoders pretrained on every frame so far with --pretrain-steps."""
    round = len(rounds)
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    batch = config.optim.batch_size * config.optim.grad_accum * world_size
    steps = fresh_round_steps(config.round_steps, config.round_epochs, labelled, batch)
    fresh = dataclasses.replace(config, out=str(fresh_directory(Path(config.out), round)),
                                optim=dataclasses.replace(config.optim, max_steps=steps))
    if trained_to(Path(fresh.out)) >= steps:
        return
    if config.pretrain_steps:
        fresh = dataclasses.replace(fresh, init_encoders=str(pretrain_round_encoders(config, rounds)))
    if rank == 0:
        passes = f"{config.round_epochs:g} pass{'' if config.round_epochs == 1 else 'es'} over {labelled:,} " \
            f"expert-labelled frames at batch {batch:,}"
        why = passes if steps > config.round_steps else \
            "--round-steps" + (f", more than {passes} take" if config.round_epochs else "")
        print(f"round {round}: a fresh policy trains {steps:,} steps ({why})", flush=True)
    run_training(fresh, labels)
    crash_point("fleet-trained")


def train_round(config: FleetLearnConfig, rounds: list[FleetStore], labelled: int) -> None:
    """Round ``len(rounds)``'s training (round 0: the seed's), on the seed and the labels of ``rounds``
    (``labelled`` expert-labelled frames in all), unless it is done: the run carries on to the round's step,
    or a fresh policy trains (``train_fresh``)."""
    round, labels = len(rounds), DeploymentLabels(rounds, config.own_successes) if rounds else None
    if config.retrain == "fresh" and round:
        train_fresh(config, rounds, labels, labelled)
        return
    until = config.optim.max_steps + round * config.round_steps
    if trained_to(Path(config.out)) < until:  # a finished round is not loaded again
        schedule = dataclasses.replace(config, optim=dataclasses.replace(config.optim, max_steps=config.total_steps))
        run_training(schedule, labels, until=until, rewarm=config.round_lr if round else 0.0)
        crash_point("fleet-trained")


def check_inputs(config: FleetLearnConfig, store: FleetStore) -> None:
    """Everything a run can be refused for, before it writes anything: the task the seed store names (a plug-in
    one only with --task), and the run in --out: where it trains on, it must carry on with these options on this
    store; where its seed policy is only deployed from now on (--retrain fresh, the seed trained), it must have
    been trained on the fleet's task."""
    recorded_task(store.manifest["task"]["reference"], config.task, f"{store.path / MANIFEST}")
    run = Path(config.out)
    if config.retrain == "carry" or trained_to(run) < config.optim.max_steps:
        check_resumable(config, store)
        return
    trained_on, fleet = (open_checkpoint(run, quiet=True).identity or {}).get("task"), store.manifest["task"]["name"]
    if trained_on not in (None, fleet):
        raise ValueError(f"cannot deploy {run}: it was trained on task {trained_on}, not {fleet} (--data): "
                         "deploy it on a fleet of its task, or train another task in another --out")


def run_fleet_learning(config: FleetLearnConfig) -> None:
    """Train on the seed, then deploy, retrain and account for each round: the whole of fleet_learn.py."""
    master = int(os.environ.get("RANK", "0")) == 0
    store = open_training_store(config.data, quiet=not master)
    check_inputs(config, store)
    ddp = "RANK" in os.environ
    if ddp:  # one process group for every phase; the others wait in it while rank 0 deploys
        join_process_group(ROUND_TIMEOUT)
    last = config.rounds if config.stop_after is None else min(config.stop_after, config.rounds)
    rounds: list[FleetStore] = []
    for round in range(last + 1):
        if round > 0:
            if master:
                deploy(config, store, round)
            if ddp:
                dist.barrier()
            rounds.append(FleetStore.open(round_directory(Path(config.out), round)))
        accounts = accounts_so_far(config, store, rounds)
        train_round(config, rounds, accounts[-1]["labelled_so_far"])
        if master:
            write_accounts(config, accounts)
    if ddp:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    config = parse_config(FleetLearnConfig, __doc__, argv)
    with output_lock(config.out, "train/fleet_learn.py"):  # outside one_line_errors, as in bc.py
        with one_line_errors(sys.argv[1:] if argv is None else argv, Path(config.out)):
            run_fleet_learning(config)


if __name__ == "__main__":
    main()
