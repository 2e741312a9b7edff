"""The evaluation config: a dataclass whose fields are the ``evaluate`` options."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from core.options import check_choices, check_options
from eval.split import SPLITS

POSITIONS = ("random", "fixed")  # sim.envs.metaworld's, named here without importing metaworld


@dataclass
class EvalConfig:
    checkpoint: str | None = field(default=None, metadata={
        "help": "a training run, its checkpoints/last or a checkpoint file (not needed with --expert --task)"})
    robots: int = field(default=10, metadata={"help": "robots evaluated: OFFSET..OFFSET+N-1 of the fleet seed"})
    episodes: int = field(default=10, metadata={
        "help": "episodes per robot, on held-out seeds; with many tasks (a multi-task checkpoint, --task "
                "metaworld/mt10) episodes per task, LeRobot's protocol (10 per task), split over its robots"})
    out: str = field(default="runs/eval", metadata={"help": "output directory (EVAL)"})
    robot_offset: int = field(default=0, metadata={
        "help": "first robot id; past the training fleet it measures robots never seen in training"})
    episode_offset: int = field(default=0, metadata={
        "help": "first held-out episode index per robot: a range past the reported one (e.g. 1000) tunes "
                "settings such as --n-action-steps without touching the seeds a result is reported on"})
    split: str = field(default="dev", metadata={
        "help": "dev (every choice is made here) or test (reported figures only: its own seed stream and the held-out "
                "robots from 1,000,000 on; every test evaluation is logged in --ledger)"})
    question: str | None = field(default=None, metadata={
        "help": "with --split test: the question this evaluation answers, counted in the ledger (default: the "
                "checkpoint's weights digest and the task)"})
    ledger: str = field(default="runs/test_ledger.jsonl", metadata={
        "help": "with --split test: the ledger every test evaluation appends a line to"})
    task: str | None = field(default=None, metadata={
        "help": "task (default: the checkpoint's; checked against it). A plug-in module:attr the checkpoint names is "
                "imported only when given here: a file names code, only your command line imports it"})
    positions: str | None = field(default=None, metadata={
        "help": "Meta-World tasks only: random (the default: the fleet's, per robot and seed) or fixed (the MT50 "
                "convention: one object and goal position per task)"})
    seed: int | None = field(default=None, metadata={
        "help": "fleet seed (default: the training collection's, so robot k is the robot trained on)"})
    expert: bool = field(default=False, metadata={"help": "evaluate the scripted expert instead of the policy"})
    compare: bool = field(default=False, metadata={
        "help": "evaluate the policy and the expert on the same robots and seeds"})
    n_action_steps: int | None = field(default=None, metadata={
        "help": "actions of each predicted chunk executed before predicting again (default: the checkpoint's)"})
    max_parameters: int | None = field(default=None, metadata={
        "help": "refuse a checkpoint whose policy has more parameters than this, before building it (default: "
                "as many as a quarter of this machine's memory holds at 4 bytes each)"})
    videos: int = field(default=0, metadata={"help": "episodes recorded as MP4, spread over the sites"})
    batch: int = field(default=16, metadata={"help": "episodes of one robot run in lockstep (one batched policy call)"})
    device: str = field(default="auto", metadata={"help": "policy device on the workers: auto (cuda if present), cpu, cuda"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "local worker processes"})
    scheduler: str | None = field(default=None, metadata={"help": "address of an existing dask scheduler"})
    overwrite: bool = field(default=False, metadata={"help": "replace an earlier evaluation in OUT"})
    quiet: bool = field(default=False, metadata={"help": "no progress bar and no table"})

    def __post_init__(self):
        check_options(self, ("robots", "episodes", "batch", "workers"), lambda value: value >= 1, "must be at least 1")
        for name in ("n_action_steps", "max_parameters"):
            if getattr(self, name) is not None:
                check_options(self, (name,), lambda value: value >= 1, "must be at least 1")
        check_options(self, ("robot_offset", "episode_offset", "videos"), lambda value: value >= 0, "must be at least 0")
        if self.seed is not None:
            check_options(self, ("seed",), lambda value: value >= 0, "must not be negative")
        check_choices(self, {"split": SPLITS, **({"positions": POSITIONS} if self.positions is not None else {})})
        if self.split == "dev" and self.question is not None:
            raise ValueError("--question names what a test evaluation answers: it needs --split test")
        if self.expert and self.compare:
            raise ValueError("--expert evaluates the expert alone and --compare evaluates both: choose one")
        if self.checkpoint is None and not (self.expert and self.task):
            raise ValueError("--checkpoint is required (or --expert --task NAME to evaluate the scripted expert alone)")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")

    @property
    def agents(self) -> tuple[str, ...]:
        """What is rolled out: the policy, the expert, or both (the first one is reported first)."""
        if self.expert:
            return ("expert",)
        return ("policy", "expert") if self.compare else ("policy",)

    def to_dict(self) -> dict:
        return asdict(self)
