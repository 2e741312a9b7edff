"""The policy's options: the ones every kind reads, and each kind's own (``cnn``, ``lerobot``).

``policy_spec`` (``train/policies/policy.py``) turns them into a ``PolicySpec`` on a store's
features, and each kind reads its own group there (``Policy.options``). They are plain
dataclasses apart from the kinds' code, so that parsing a command line imports no kind
(lerobot takes seconds to import). Their fields are command-line options (``core/options.py``):
``--policy``, ``--vision-backbone``, ``--lerobot-config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.options import check_choices, check_options
from dataset.inputs import INPUTS

VISION_BACKBONES = ("small", "resnet18")  # train/policies/vision.py
LEROBOT_SIZES = ("small", "default")  # train/policies/lerobot_policies.py


@dataclass
class CNNOptions:
    """The cnn's own options (``train/policies/vision.py``)."""

    vision_backbone: str = field(default="small", metadata={"help": "cnn image encoder: small or resnet18"})

    def __post_init__(self):
        check_choices(self, {"vision_backbone": VISION_BACKBONES})


@dataclass
class LeRobotOptions:
    """act's and diffusion's own options (``train/policies/lerobot_policies.py``)."""

    lerobot_config: str = field(default="small", metadata={
        "help": "act/diffusion model sizes: small (CPU-sized) or default (LeRobot's)"})

    def __post_init__(self):
        check_choices(self, {"lerobot_config": LEROBOT_SIZES})


@dataclass
class PolicyOptions:
    """The options every kind reads (its window, inputs, head and augmentation), and each kind's own group."""

    policy: str = field(default="mlp", metadata={"help": "policy kind: mlp, cnn, act or diffusion"})
    n_obs_steps: int | None = field(default=None, metadata={  # None: the kind's (observation_steps)
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
    inputs: str = field(default="auto", metadata={
        "help": "what the policy sees: state (proprioception + the privileged object and goal state), "
                "proprio+cameras (what a real robot has), cameras, or state+cameras; auto: proprio+cameras for "
                "cnn, act and diffusion on a store with cameras, else state"})
    image_shift: int = field(default=4, metadata={
        "help": "training augmentation: shift each image by up to this many pixels (0: off)"})
    colour_jitter: float = field(default=0.0, metadata={
        "help": "training augmentation: scale brightness and contrast by up to this fraction (0: off)"})
    task_input: bool = field(default=True, metadata={
        "help": "on a multi-task store, the policy reads its task (a one-hot beside observation.state); "
                "--no-task-input: it tells the tasks from what it sees, as LeRobot's policies do, so "
                "train.export exports it (for lerobot-eval)"})
    cnn: CNNOptions = field(default_factory=CNNOptions)
    lerobot: LeRobotOptions = field(default_factory=LeRobotOptions)

    @property
    def observation_steps(self) -> int:
        """``n_obs_steps``, or where it is not given the kind's default: 1 for act, 2 for the others."""
        return self.n_obs_steps or (1 if self.policy == "act" else 2)

    def __post_init__(self):
        if self.policy == "act" and self.observation_steps != 1:
            raise ValueError(f"--n-obs-steps must be 1 for act (LeRobot's ACT takes one frame), got {self.n_obs_steps}")
        check_choices(self, {"inputs": ("auto", *INPUTS)})
        check_options(self, ("image_shift",), lambda value: value >= 0, "must not be negative")
        check_options(self, ("colour_jitter",), lambda value: 0.0 <= value < 1.0, "must be in [0, 1)")
        check_options(self, ("n_obs_steps", "horizon", "n_action_steps", "action_modes"),
                      lambda value: value is None or value >= 1, "must be at least 1")
        self.hidden = tuple(self.hidden)
        if not self.hidden:
            raise ValueError("--hidden needs at least one width (e.g. --hidden 256 256); none makes a linear model")
        if any(width < 1 for width in self.hidden):
            raise ValueError(f"--hidden widths must be at least 1, got {' '.join(map(str, self.hidden))}")
