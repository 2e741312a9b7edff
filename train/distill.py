"""Distillation: a small student learns to act as a trained teacher does, on the fleet store.

    python train/distill.py --teacher runs/teacher --data data/fleet --out runs/student --hidden 64 64
    torchrun --standalone --nproc_per_node=2 train/distill.py --teacher runs/teacher --data data/fleet \\
        --out runs/student --dagger-rounds 2

The student trains in train/bc.py's loop (DDP, checkpoints, resume, metrics, EMA), on the
teacher's actions instead of the expert's: every batch of windows goes through the frozen
teacher on the training device, and the student learns the action chunk the teacher
predicts there (``TeacherLabels``). The teacher is any checkpoint ``evaluate`` loads
(train/bc.py's or train/federated.py's); the student is any policy kind but diffusion,
usually smaller (a warning says when it is not), with its own inputs.

With ``--dagger-rounds R`` (DAgger), after ``--max-steps`` steps on the store the student is
rolled out on every robot it trains on (all, or those ``--robots`` and ``--sites`` keep), the
teacher labels each state it visits, and those episodes become a new store in collect's
format (train/dagger.py); the student then trains
``--dagger-steps`` more on the store and every round so far, and so on R times. Rank 0
collects while the other ranks wait. The learning-rate schedule spans all the steps.

The student is an ordinary checkpoint: ``evaluate --checkpoint OUT`` runs it. Rerunning
the same command carries on where it stopped, in training as in the rounds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from train.restarts import end_if_failed_before

if __name__ == "__main__":  # a torchrun restart of inputs that failed before ends here, before torch loads (seconds)
    end_if_failed_before(sys.argv[1:])

import torch  # noqa: E402
import torch.distributed as dist

from core.errors import fail, one_line, quiet_closed_pipes, warn
from core.lock import output_lock
from core.options import parse_config
from dataset import FleetStore
from dataset.chunks import DataError
from dataset.episodes import EpisodeRef, select_episodes
from dataset.manifest import MANIFEST
from dataset.stats import fleet_stats
from dataset.windows import WindowSpec
from sim.tasks import recorded_task
from train.bc import join_process_group, one_line_errors, run_training
from train.checkpoint import load_policy
from train.config import TrainConfig, plugin_task_option
from train.dagger import collect_round, round_directory
from train.data import open_training_store, store_policy_spec
from train.policies.options import PolicyOptions
from train.policies.policy import Policy, PolicySpec, make_policy
from train.state import check_resumable

ROUND_TIMEOUT = timedelta(hours=2)  # how long the other ranks wait for rank 0's DAgger rollouts


@dataclass
class DistillConfig(TrainConfig):
    teacher: str = field(default="", metadata={
        "help": "the teacher: a run directory or checkpoint that evaluate loads"})
    policy: PolicyOptions = field(default_factory=lambda: PolicyOptions(hidden=(64, 64)))  # a small student
    dagger_rounds: int = field(default=0, metadata={
        "help": "DAgger rounds after the first --max-steps: roll the student out, label with the teacher, train on"})
    dagger_episodes: int = field(default=4, metadata={"help": "episodes per robot rolled out in each round"})
    dagger_steps: int = field(default=1000, metadata={"help": "training steps after each round"})
    task: str | None = plugin_task_option()
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers for the rollouts"})

    def __post_init__(self):
        super().__post_init__()
        if not self.teacher:
            raise ValueError("--teacher is required: a run directory or checkpoint of train/bc.py")
        if self.policy.policy == "diffusion":
            raise ValueError("a diffusion student is not supported (its windows start before the current frame, "
                             "where the teacher gives no actions); use --policy mlp, cnn or act")
        for name in ("dagger_rounds",):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must not be negative")
        for name in ("dagger_episodes", "dagger_steps", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")

    @property
    def total_steps(self) -> int:
        return self.optim.max_steps + self.dagger_rounds * self.dagger_steps


class TeacherLabels:
    """bc.py's labeller for distillation: the teacher's action chunks replace the store's actions.

    The loader reads windows wide enough for both policies (the longer observation history,
    every feature either one sees); each batch is cut down to the student's inputs, and its
    ``action`` becomes the first ``horizon`` actions the teacher predicts from the current
    frame. The store's padding mask stays: steps past an episode's end are not learned.
    ``stores`` are the DAgger rounds' stores, trained on besides ``--data``.
    """

    def __init__(self, teacher: Policy, stores: list[FleetStore]):
        self.teacher, self.stores = teacher, stores
        self.student: PolicySpec | None = None

    def __str__(self) -> str:
        return f"distilled from the {self.teacher.spec.kind} teacher's actions" + \
            (f", with {len(self.stores)} DAgger round(s)" if self.stores else "")

    def episodes(self) -> list[EpisodeRef]:
        """Every episode of the DAgger rounds, the student's failures too."""
        return select_episodes(self.stores, success=None)

    def window(self, student: PolicySpec) -> WindowSpec:
        self.student = student
        features = dict.fromkeys([*self.teacher.spec.features, *student.features, "action"])
        return WindowSpec.of(max(student.n_obs_steps, self.teacher.spec.n_obs_steps), student.horizon, list(features))

    @torch.no_grad()
    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        device = batch["action"].device
        if next(self.teacher.buffers()).device != device:
            self.teacher.to(device)
        teacher_steps, student_steps = self.teacher.spec.n_obs_steps, self.student.n_obs_steps
        teacher_inputs = {name: batch[name][:, -teacher_steps:] for name in self.teacher.spec.features}
        chunk = self.teacher.predict_chunk(teacher_inputs)
        return {**{name: batch[name][:, -student_steps:] for name in self.student.features},
                "action": chunk[:, : self.student.horizon].to(batch["action"].dtype),
                "action_is_pad": batch["action_is_pad"]}


def load_teacher(config: DistillConfig, store: FleetStore) -> Policy:
    """The teacher, checked against the store and the student; a one-line error names what does not fit."""
    try:
        teacher, checkpoint = load_policy(Path(config.teacher))
    except ValueError as error:  # no checkpoint there, an old or damaged one
        fail(f"--teacher {config.teacher}: {error}")
    except (KeyError, TypeError, RuntimeError) as error:  # weights that do not fit their spec
        fail(f"--teacher {config.teacher} is not a policy checkpoint that evaluate loads ({one_line(error)})")
    task, store_task = (checkpoint.task or {}).get("name"), (store.manifest or {}).get("task", {}).get("name")
    if task != store_task:
        fail(f"--teacher {config.teacher} was trained on {task}, but {store.path} holds {store_task}: "
             f"distil on a store of {task}")
    if missing := [name for name in teacher.spec.features if name not in store.features]:
        fail(f"the teacher sees {missing[0]}, which {store.path} does not have "
             "(collect the store with the teacher's cameras, e.g. --cameras front wrist)")
    if config.policy.horizon > teacher.chunk_length:
        fail(f"--horizon {config.policy.horizon} is longer than the {teacher.chunk_length} actions the teacher "
             f"predicts; use --horizon {teacher.chunk_length} or less")
    return teacher.eval().requires_grad_(False)


def warn_if_larger(student: PolicySpec, store: FleetStore, teacher: Policy) -> None:
    """A warning where the student has at least as many parameters as its teacher; a damaged store is a
    one-line error."""
    try:
        stats = fleet_stats(store)
    except DataError as error:
        fail(str(error))
    policies = (make_policy(student, stats), teacher)
    sizes = [sum(p.numel() for p in policy.parameters()) for policy in policies]
    if sizes[0] >= sizes[1]:
        warn(f"the student ({student.kind}, {sizes[0]:,} parameters) is not smaller than the teacher "
             f"({teacher.spec.kind}, {sizes[1]:,}): distillation then saves nothing to send or run")


def rollout_robots(config: DistillConfig, store: FleetStore) -> list[int]:
    """The robots of ``store`` that ``--robots`` and ``--sites`` keep: those DAgger rolls the student out on."""
    robots, sites = config.data.robots, config.data.sites
    return [robot for robot in store.robots if (not robots or robot in robots)
            and (not sites or store.site_of(robot) in sites)]


def check_out(config: DistillConfig) -> None:
    """A one-line error where ``--out`` is the teacher's own run, or holds a run of another command or of
    another teacher: a distillation carries on only its own run."""
    out, teacher = Path(config.out).resolve(), Path(config.teacher).resolve()
    if teacher == out or out in teacher.parents:
        fail(f"--out {config.out} is the teacher's own run: distil into another directory")
    saved = Path(config.out) / "config.json"
    if not saved.is_file():
        return
    try:
        recorded = json.loads(saved.read_text()).get("config", {}).get("teacher")
    except (ValueError, AttributeError):
        fail(f"{saved} is damaged: --out holds no run distill.py can carry on; choose another --out")
    if recorded is None:
        fail(f"--out {config.out} holds a run of another command (no teacher in its config.json): "
             "distil into another directory")
    if Path(recorded).resolve() != teacher:
        fail(f"--out {config.out} holds a distillation of the teacher {recorded}, not {config.teacher}: "
             "distil into another directory")


def run_distillation(config: DistillConfig) -> None:
    """Distil the teacher of ``config`` into its student, with its DAgger rounds: the whole of distill.py."""
    master = int(os.environ.get("RANK", "0")) == 0
    check_out(config)
    store = open_training_store(config.data, quiet=not master)
    if config.dagger_rounds:
        recorded_task(store.manifest["task"]["reference"], config.task, f"{store.path / MANIFEST}")
    teacher = load_teacher(config, store)
    check_resumable(config, store)
    try:
        student = store_policy_spec(config.policy, store)
    except ValueError as error:
        fail(str(error))
    if master:
        warn_if_larger(student, store, teacher)
    ddp = "RANK" in os.environ
    if ddp:  # one process group for every phase; the others wait in it while rank 0 rolls out
        join_process_group(ROUND_TIMEOUT)
    schedule = dataclasses.replace(config, optim=dataclasses.replace(config.optim, max_steps=config.total_steps))
    rounds: list[FleetStore] = []
    for round in range(config.dagger_rounds + 1):
        if round > 0:
            if master:
                collect_round(Path(config.out), round, config.teacher, store, rollout_robots(config, store),
                              config.dagger_episodes, config.workers)
            if ddp:
                dist.barrier()
            rounds.append(FleetStore.open(round_directory(Path(config.out), round)))
        until = config.optim.max_steps + round * config.dagger_steps
        run_training(schedule, TeacherLabels(teacher, rounds), until=until)
    if ddp:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    config = parse_config(DistillConfig, __doc__, argv)
    with output_lock(config.out, "train/distill.py"):  # outside one_line_errors, as in bc.py
        with one_line_errors(sys.argv[1:] if argv is None else argv, Path(config.out)):
            run_distillation(config)


if __name__ == "__main__":
    main()
