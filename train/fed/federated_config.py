"""The federated training config: a dataclass whose fields are the ``train/federated.py`` options."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from core.errors import check_output_directory
from core.options import check_choices, check_options
from train.comm.compression import COMPRESSIONS
from train.config import DataOptions
from train.policies.options import PolicyOptions

PERSONAL_MODES = ("none", "robot", "site")


@dataclass
class FederatedConfig(PolicyOptions, DataOptions):  # the policy and data options are train/bc.py's
    data: str = field(default="data/fleet", metadata={"help": "fleet store: each robot's shard is one client's data"})
    out: str = field(default="runs/federated", metadata={"help": "run directory: config, metrics, checkpoints"})
    rounds: int = field(default=20, metadata={"help": "communication rounds in total (a resumed run counts on)"})
    local_epochs: int = field(default=1, metadata={"help": "passes over its own data each client makes per round"})
    fraction: float = field(default=1.0, metadata={"help": "share of the robots sampled each round (C)"})
    robots: tuple[int, ...] = field(default=(), metadata={"help": "clients: these robots only (default: all)"})
    sites: tuple[str, ...] = field(default=(), metadata={"help": "clients: robots of these sites only (default: all)"})
    # local training on a client
    batch_size: int = field(default=64, metadata={"help": "windows per local step"})
    lr: float = field(default=1e-3, metadata={"help": "local AdamW learning rate (cosine decay over rounds to 10%)"})
    warmup_rounds: int = field(default=0, metadata={"help": "rounds of linear learning-rate warmup"})
    weight_decay: float = field(default=1e-4, metadata={"help": "local AdamW weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "max local gradient norm (0: no clipping)"})
    prox_mu: float = field(default=0.0, metadata={"help": "FedProx: weight of (mu/2)|w - w_global|^2 (0: plain FedAvg)"})
    mode: str = field(default="memory", metadata={"help": "client dataset mode: memory or streaming"})
    # the server
    server_lr: float = field(default=1.0, metadata={"help": "step size on the averaged delta (1: plain FedAvg)"})
    server_momentum: float = field(default=0.0, metadata={
        "help": "FedAvgM: the server steps along a momentum of the averaged deltas (0: none)"})
    compression: str = field(default="none", metadata={"help": "client deltas on the wire: none, int8 or topk"})
    topk_fraction: float = field(default=0.01, metadata={"help": "with --compression topk: share of entries sent"})
    personal: str = field(default="none", metadata={"help": "keep heads local: none, robot or site"})
    personal_after: int = field(default=0, metadata={
        "help": "with --personal: rounds in which the head is still shared by the whole fleet before it splits "
                "(all of them with --head-epochs: personal through the final fit only)"})
    head_epochs: int = field(default=0, metadata={
        "help": "with --personal: after the last round, passes each robot makes fitting its head to the final "
                "shared weights, those frozen (0: none)"})
    deadline: float = field(default=600.0, metadata={"help": "seconds a round waits for its clients; later ones are dropped"})
    min_completed: float = field(default=0.5, metadata={"help": "share of a round's clients that must finish in time"})
    round_attempts: int = field(default=3, metadata={"help": "tries of a round (fresh sample each) before stopping"})
    # running
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "local dask worker processes"})
    scheduler: str | None = field(default=None, metadata={"help": "address of an existing dask scheduler"})
    threads: int = field(default=0, metadata={
        "help": "torch threads per client (0: on the local cluster, the host's cores / its workers and other "
                "training ranks; with --scheduler, 1)"})
    keep_checkpoints: int = field(default=3, metadata={"help": "newest checkpoints kept"})
    resume: bool = field(default=True, metadata={"help": "carry on from OUT's latest checkpoint"})
    seed: int = field(default=0, metadata={"help": "seeds the weights, the client sampling and local shuffles"})
    quiet: bool = field(default=False, metadata={"help": "no progress bar and no line per round"})

    def __post_init__(self):
        super().__post_init__()
        check_options(self, ("rounds", "local_epochs", "batch_size", "workers", "round_attempts", "keep_checkpoints"),
                      lambda value: value >= 1, "must be at least 1")
        check_options(self, ("fraction", "min_completed", "topk_fraction"), lambda value: 0.0 < value <= 1.0,
                      "must be in (0, 1]")
        check_options(self, ("lr", "server_lr", "deadline"), lambda value: value > 0, "must be positive")
        check_options(self, ("server_momentum",), lambda value: 0.0 <= value < 1.0, "must be in [0, 1)")
        check_options(self, ("weight_decay", "grad_clip", "prox_mu", "warmup_rounds", "personal_after", "head_epochs",
                             "threads", "seed"),
                      lambda value: value >= 0, "must not be negative")
        check_choices(self, {"compression": COMPRESSIONS, "personal": PERSONAL_MODES, "mode": ("memory", "streaming")})
        # --personal-after R (every round shared) with --head-epochs: heads personal through the final fit only
        last_split = self.rounds if self.head_epochs else self.rounds - 1
        if self.personal_after and (self.personal == "none" or self.personal_after > last_split):
            raise ValueError(f"--personal-after {self.personal_after} needs --personal robot or site and fewer "
                             f"rounds than --rounds ({self.rounds}), or as many with --head-epochs")
        if self.head_epochs and self.personal == "none":
            raise ValueError("--head-epochs fits personal heads: it needs --personal robot or site")
        check_output_directory(self.out)
        self.sites, self.robots = tuple(self.sites), tuple(self.robots)
