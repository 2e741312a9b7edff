"""The training configs: dataclasses whose fields are the command-line options.

``PolicyOptions`` are the options that pick and size the policy (``train/policies/policy.py``'s
``policy_spec`` reads them); ``TrainConfig`` (``train/bc.py``) and ``FederatedConfig``
(``train/fed/federated_config.py``) both extend it, so the two commands build policies alike.
They both extend ``DataOptions`` too, the options about the fleet store they read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from core.errors import check_output_directory
from core.options import check_choices, check_options
from dataset.inputs import INPUTS
from train.comm.comm_hooks import COMM_HOOKS

VISION_BACKBONES = ("small", "resnet18")  # train/policies/vision.py
LEROBOT_SIZES = ("small", "default")  # train/policies/lerobot_policies.py


@dataclass
class DataOptions:
    """The options about the fleet store a training command reads (``train/data.py`` checks it)."""

    allow_missing_robots: bool = field(default=False, metadata={
        "help": "train on the robots whose stores are on disk when some that the manifest lists are missing "
                "(default: stop)"})


@dataclass
class PolicyOptions:
    policy: str = field(default="mlp", metadata={"help": "policy kind: mlp, cnn, act or diffusion"})
    n_obs_steps: int | None = field(default=None, metadata={
        "help": "observation frames per window (default: 1 for act, 2 for the others)"})
    horizon: int = field(default=16, metadata={"help": "actions predicted per window (the chunk)"})
    n_action_steps: int = field(default=8, metadata={"help": "actions of a chunk executed before predicting again"})
    hidden: tuple[int, ...] = field(default=(256, 256), metadata={"help": "MLP hidden widths"})
    action_modes: int = field(default=1, metadata={
        "help": "mlp and cnn head: 1 regresses the action chunk (mean squared error); K > 1 fits a mixture of K "
                "Gaussians over it and acts on its likeliest mode, for demonstrations that branch"})
    mode_actions: tuple[str, ...] = field(default=(), metadata={
        "help": "with --action-modes K > 1: the action dimensions (names, e.g. ee_dyaw) whose demonstrations "
                "branch; the modes span only those and share one regressed mean for the others (default: all)"})
    vision_backbone: str = field(default="small", metadata={"help": "cnn image encoder: small or resnet18"})
    lerobot_config: str = field(default="small", metadata={
        "help": "act/diffusion model sizes: small (CPU-sized) or default (LeRobot's)"})
    inputs: str = field(default="auto", metadata={
        "help": "what the policy sees: state (proprioception + the privileged object and goal state), "
                "proprio+cameras (what a real robot has), cameras, or state+cameras; auto: proprio+cameras for "
                "cnn, act and diffusion on a store with cameras, else state"})
    image_shift: int = field(default=4, metadata={
        "help": "training augmentation: shift each image by up to this many pixels (0: off)"})
    colour_jitter: float = field(default=0.0, metadata={
        "help": "training augmentation: scale brightness and contrast by up to this fraction (0: off)"})

    def __post_init__(self):
        if self.n_obs_steps is None:
            self.n_obs_steps = 1 if self.policy == "act" else 2
        if self.policy == "act" and self.n_obs_steps != 1:
            raise ValueError(f"--n-obs-steps must be 1 for act (LeRobot's ACT takes one frame), got {self.n_obs_steps}")
        check_choices(self, {"vision_backbone": VISION_BACKBONES, "lerobot_config": LEROBOT_SIZES,
                             "inputs": ("auto", *INPUTS)})
        check_options(self, ("image_shift",), lambda value: value >= 0, "must not be negative")
        check_options(self, ("colour_jitter",), lambda value: 0.0 <= value < 1.0, "must be in [0, 1)")
        check_options(self, ("n_obs_steps", "horizon", "n_action_steps", "action_modes"), lambda value: value >= 1,
                      "must be at least 1")
        self.hidden = tuple(self.hidden)
        if not self.hidden:
            raise ValueError("--hidden needs at least one width (e.g. --hidden 256 256); none makes a linear model")
        if any(width < 1 for width in self.hidden):
            raise ValueError(f"--hidden widths must be at least 1, got {' '.join(map(str, self.hidden))}")


@dataclass
class TrainConfig(PolicyOptions, DataOptions):
    data: str = field(default="data/fleet", metadata={"help": "fleet store to train on (the OUT of collect)"})
    out: str = field(default="runs/bc", metadata={"help": "run directory: config, metrics, checkpoints"})
    sites: tuple[str, ...] = field(default=(), metadata={"help": "train on these sites only (default: all)"})
    robots: tuple[int, ...] = field(default=(), metadata={"help": "train on these robots only (default: all)"})
    episodes_per_robot: int = field(default=0, metadata={
        "help": "train on each robot's first N successful episodes only (0: all of them)"})
    val_fraction: float = field(default=0.1, metadata={"help": "episodes held out for validation"})
    mode: str = field(default="memory", metadata={"help": "dataset mode: memory or streaming"})
    batch_size: int = field(default=512, metadata={"help": "windows per rank per micro-step"})
    grad_accum: int = field(default=1, metadata={"help": "micro-batches per optimiser step (DDP syncs on the last)"})
    max_steps: int = field(default=2000, metadata={"help": "optimiser steps in total (a resumed run counts on)"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate"})
    warmup_steps: int = field(default=100, metadata={"help": "linear warmup, then cosine decay to 10%"})
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm (0: no clipping)"})
    log_interval: int = field(default=50, metadata={"help": "steps between progress lines"})
    val_interval: int = field(default=250, metadata={"help": "steps between validation losses"})
    checkpoint_interval: int = field(default=500, metadata={"help": "steps between checkpoints"})
    keep_checkpoints: int = field(default=3, metadata={"help": "newest checkpoints kept"})
    resume: bool = field(default=True, metadata={"help": "carry on from OUT's latest checkpoint"})
    allow_new_data: bool = field(default=False, metadata={
        "help": "resume on other data of the same task (another collection or selection of it), with the "
                "checkpoint's normalisation (default: refuse)"})
    seed: int = field(default=0, metadata={"help": "seeds the weights, the sampler and the split"})
    # optimisation (train/bc.py)
    lr_scaling: str = field(default="none", metadata={
        "help": "scale --lr to the effective batch: none, linear (lr x B/base) or sqrt (lr x sqrt(B/base))"})
    base_batch: int = field(default=512, metadata={"help": "the effective batch --lr is meant for (--lr-scaling)"})
    amp: str = field(default="none", metadata={
        "help": "mixed precision: none, bf16 (autocast, CPU or GPU) or fp16 (autocast and a GradScaler, GPU only)"})
    ema_decay: float = field(default=0.0, metadata={
        "help": "EMA of the weights with this decay, e.g. 0.999 (0: off); evaluation and val loss use the EMA"})
    threads: int = field(default=0, metadata={
        "help": "torch threads per rank (0: the host's cores / the training ranks on the host, counted again as "
                "runs start and end; train/threads.py)"})
    # communication between ranks (train/comm/comm_hooks.py)
    comm_hook: str = field(default="auto", metadata={
        "help": "how DDP sends gradients: auto (shm between CPU ranks on one host, ring across hosts, none on GPU), "
                "none (DDP's float32 all-reduce), shm or ring (ours, CPU), fp16, bf16, powersgd or int8"})
    powersgd_rank: int = field(default=2, metadata={"help": "rank of PowerSGD's low-rank factors"})
    bucket_cap_mb: float = field(default=25.0, metadata={"help": "DDP gradient bucket size in MiB"})
    # monitoring (train/monitor.py)
    wandb: bool = field(default=False, metadata={"help": "also log to Weights & Biases"})
    wandb_project: str = field(default="robofleet", metadata={"help": "Weights & Biases project"})
    wandb_mode: str = field(default="", metadata={
        "help": "online, offline or disabled (default: WANDB_MODE, else online); offline needs no network"})

    def __post_init__(self):
        super().__post_init__()
        check_options(self, ("batch_size", "grad_accum", "max_steps", "log_interval", "val_interval",
                             "checkpoint_interval", "keep_checkpoints", "base_batch", "powersgd_rank"),
                      lambda value: value >= 1, "must be at least 1")
        check_choices(self, {"lr_scaling": ("none", "linear", "sqrt"), "amp": ("none", "bf16", "fp16"),
                             "comm_hook": COMM_HOOKS, "wandb_mode": ("", "online", "offline", "disabled"),
                             "mode": ("memory", "streaming")})
        check_options(self, ("ema_decay", "val_fraction"), lambda value: 0.0 <= value < 1.0, "must be in [0, 1)")
        check_options(self, ("lr", "bucket_cap_mb"), lambda value: value > 0, "must be positive")
        check_options(self, ("warmup_steps", "weight_decay", "grad_clip", "episodes_per_robot", "seed"),
                      lambda value: value >= 0, "must not be negative")
        check_options(self, ("threads",), lambda value: value >= 0, "must be 0 (automatic) or more")
        check_output_directory(self.out)
        self.sites, self.robots = tuple(self.sites), tuple(self.robots)
