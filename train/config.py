"""The training configs: dataclasses whose fields are the command-line options.

``PolicyOptions`` (``train/policies/options.py``) are the options that pick and size the policy
and ``DataOptions`` those about the fleet store a command reads.
``TrainConfig`` (``train/bc.py``) groups its options by concern: ``data``, ``policy``, ``optim``,
``ddp`` and ``log``, each a dataclass of its own, whose fields are still flat options
(``--max-steps``, ``--comm-hook``: ``core/options.py``). ``FederatedConfig``
(``train/fed/federated_config.py``) extends ``PolicyOptions`` and ``DataOptions``, so the two
commands build policies alike. A run saves its config nested as it is; ``flat_options`` reads a
saved one by option name, the flat ones of runs before the groups too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import check_output_directory
from core.options import check_choices, check_options
from train.comm.comm_hooks import COMM_HOOKS
from train.policies.options import PolicyOptions


@dataclass
class DataOptions:
    """The options about the fleet store a training command reads (``train/data.py`` checks it)."""

    allow_missing_robots: bool = field(default=False, metadata={
        "help": "train on the robots whose stores are on disk when some that the manifest lists are missing "
                "(default: stop)"})


@dataclass
class DataConfig(DataOptions):
    """What train/bc.py trains on: the store and the episodes of it."""

    data: str = field(default="data/fleet", metadata={"help": "fleet store to train on (the OUT of collect)"})
    sites: tuple[str, ...] = field(default=(), metadata={"help": "train on these sites only (default: all)"})
    robots: tuple[int, ...] = field(default=(), metadata={"help": "train on these robots only (default: all)"})
    episodes_per_robot: int = field(default=0, metadata={
        "help": "train on each robot's first N successful episodes only (0: all of them)"})
    val_fraction: float = field(default=0.1, metadata={"help": "episodes held out for validation"})
    mode: str = field(default="memory", metadata={"help": "dataset mode: memory or streaming"})

    def __post_init__(self):
        check_choices(self, {"mode": ("memory", "streaming")})
        check_options(self, ("val_fraction",), lambda value: 0.0 <= value < 1.0, "must be in [0, 1)")
        check_options(self, ("episodes_per_robot",), lambda value: value >= 0, "must not be negative")
        self.sites, self.robots = tuple(self.sites), tuple(self.robots)


@dataclass
class OptimConfig:
    """How train/bc.py updates the weights (train/state.py)."""

    batch_size: int = field(default=512, metadata={"help": "windows per rank per micro-step"})
    grad_accum: int = field(default=1, metadata={"help": "micro-batches per optimiser step (DDP syncs on the last)"})
    max_steps: int = field(default=2000, metadata={"help": "optimiser steps in total (a resumed run counts on)"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate"})
    warmup_steps: int = field(default=100, metadata={"help": "linear warmup, then cosine decay to 10%"})
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm (0: no clipping)"})
    lr_scaling: str = field(default="none", metadata={
        "help": "scale --lr to the effective batch: none, linear (lr x B/base) or sqrt (lr x sqrt(B/base))"})
    base_batch: int = field(default=512, metadata={"help": "the effective batch --lr is meant for (--lr-scaling)"})
    amp: str = field(default="auto", metadata={
        "help": "mixed precision: auto (bf16 for a camera policy on a CPU with AMX or AVX512-BF16, else none; a "
                "resume keeps its own), none, bf16 (autocast, CPU or GPU) or fp16 (autocast and a GradScaler, GPU only)"})
    ema_decay: float = field(default=0.0, metadata={
        "help": "EMA of the weights with this decay, e.g. 0.999 (0: off); evaluation and val loss use the EMA"})

    def __post_init__(self):
        check_options(self, ("batch_size", "grad_accum", "max_steps", "base_batch"), lambda value: value >= 1,
                      "must be at least 1")
        check_choices(self, {"lr_scaling": ("none", "linear", "sqrt"), "amp": ("auto", "none", "bf16", "fp16")})
        check_options(self, ("ema_decay",), lambda value: 0.0 <= value < 1.0, "must be in [0, 1)")
        check_options(self, ("lr",), lambda value: value > 0, "must be positive")
        check_options(self, ("warmup_steps", "weight_decay", "grad_clip"), lambda value: value >= 0,
                      "must not be negative")


@dataclass
class DDPConfig:
    """The ranks: their threads and how they send gradients to each other (train/comm/comm_hooks.py)."""

    comm_hook: str = field(default="auto", metadata={
        "help": "how DDP sends gradients: auto (shm between CPU ranks on one host, ring across hosts, none on GPU), "
                "none (DDP's float32 all-reduce), shm or ring (ours, CPU), fp16, bf16, powersgd or int8"})
    powersgd_rank: int = field(default=2, metadata={"help": "rank of PowerSGD's low-rank factors"})
    bucket_cap_mb: float = field(default=25.0, metadata={"help": "DDP gradient bucket size in MiB"})
    threads: int = field(default=0, metadata={
        "help": "torch threads per rank (0: the host's cores / the training ranks on the host, counted again as "
                "runs start and end; train/threads.py)"})

    def __post_init__(self):
        check_choices(self, {"comm_hook": COMM_HOOKS})
        check_options(self, ("powersgd_rank",), lambda value: value >= 1, "must be at least 1")
        check_options(self, ("bucket_cap_mb",), lambda value: value > 0, "must be positive")
        check_options(self, ("threads",), lambda value: value >= 0, "must be 0 (automatic) or more")


@dataclass
class LogConfig:
    """What rank 0 records and how often (train/monitor.py), and the checkpoints it keeps."""

    log_interval: int = field(default=50, metadata={"help": "steps between progress lines"})
    val_interval: int = field(default=250, metadata={"help": "steps between validation losses"})
    checkpoint_interval: int = field(default=500, metadata={"help": "steps between checkpoints"})
    keep_checkpoints: int = field(default=3, metadata={"help": "newest checkpoints kept"})
    wandb: bool = field(default=False, metadata={"help": "also log to Weights & Biases"})
    wandb_project: str = field(default="robofleet", metadata={"help": "Weights & Biases project"})
    wandb_mode: str = field(default="", metadata={
        "help": "online, offline or disabled (default: WANDB_MODE, else online); offline needs no network"})

    def __post_init__(self):
        check_options(self, ("log_interval", "val_interval", "checkpoint_interval", "keep_checkpoints"),
                      lambda value: value >= 1, "must be at least 1")
        check_choices(self, {"wandb_mode": ("", "online", "offline", "disabled")})


@dataclass
class TrainConfig:
    """train/bc.py's options: the run's own, then each concern's group."""

    out: str = field(default="runs/bc", metadata={"help": "run directory: config, metrics, checkpoints"})
    resume: bool = field(default=True, metadata={"help": "carry on from OUT's latest checkpoint"})
    allow_new_data: bool = field(default=False, metadata={
        "help": "resume on other data of the same task (another collection or selection of it), with the "
                "checkpoint's normalisation (default: refuse)"})
    seed: int = field(default=0, metadata={"help": "seeds the weights, the sampler and the split"})
    init_encoders: str = field(default="", metadata={
        "help": "start the cnn's camera encoders from train/encoder_pretrain.py's output in this directory "
                "(default: random initialisation; a resume loads its own weights)"})
    data: DataConfig = field(default_factory=DataConfig)
    policy: PolicyOptions = field(default_factory=PolicyOptions)
    optim: OptimConfig = field(default_factory=OptimConfig)
    ddp: DDPConfig = field(default_factory=DDPConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self):
        check_options(self, ("seed",), lambda value: value >= 0, "must not be negative")
        if self.init_encoders and self.policy.policy != "cnn":
            raise ValueError(f"--init-encoders starts a cnn's camera encoders; the {self.policy.policy} policy has "
                             "none (use --policy cnn)")
        check_output_directory(self.out)


def plugin_task_option():
    """The ``--task`` field of the commands that run the task their store names (distill.py's DAgger rounds,
    fleet_learn.py's deployments): a store's manifest names code, and only the user's command line imports it
    (``sim.tasks.recorded_task``)."""
    return field(default=None, metadata={
        "help": "the plug-in task (module:attr) the --data store names, to import it: a store names code, and "
                "only what you name here is imported (registered tasks need nothing)"})


def flat_options(saved: dict) -> dict:
    """A saved config (``asdict`` of one, from JSON) by option name: each group's fields in its place.
    A config saved before the groups is flat already and comes back as it is."""
    flat = {}
    for name, value in saved.items():
        flat.update(flat_options(value) if isinstance(value, dict) else {name: value})
    return flat
