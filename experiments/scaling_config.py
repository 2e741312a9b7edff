"""The options of ``experiments.scaling``, which its report (``experiments.scaling_report``) reads too."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from core.options import check_options

SETTINGS = {  # the defaults of each --setting
    "state": {"tasks": ("pick_place", "push"), "robots": (1, 3, 9, 27, 81), "episodes": (2, 5, 10, 20, 40),
              "seeds": (0, 1, 2), "policy": "mlp", "inputs": "state", "hidden": (512, 512, 512), "batch_size": 256},
    "visuomotor": {"tasks": ("pick_place", "push"), "robots": (3, 9, 27), "episodes": (5, 10, 20), "seeds": (0, 1),
                   "policy": "cnn", "inputs": "proprio+cameras", "cameras": ("front", "wrist"), "hidden": (256, 256),
                   "batch_size": 64},
}


@dataclass
class ScalingConfig:
    setting: str = field(default="state", metadata={"help": "state or visuomotor: the defaults of what is unset"})
    tasks: tuple[str, ...] = field(default=(), metadata={"help": "tasks, in order"})
    robots: tuple[int, ...] = field(default=(), metadata={
        "help": "robots sweep: training robots 0..k-1 for each k, at --fixed-episodes each"})
    episodes: tuple[int, ...] = field(default=(), metadata={
        "help": "episodes sweep: episodes per robot, on --fixed-robots robots"})
    fixed_episodes: int = field(default=10, metadata={"help": "episodes per robot in the robots sweep"})
    fixed_robots: int = field(default=9, metadata={"help": "training robots in the episodes sweep"})
    seeds: tuple[int, ...] = field(default=(), metadata={"help": "training seeds per point (bc.py --seed)"})
    policy: str = field(default="", metadata={"help": "policy kind trained (bc.py --policy)"})
    inputs: str = field(default="", metadata={"help": "what the policy sees (bc.py --inputs)"})
    cameras: tuple[str, ...] = field(default=(), metadata={"help": "cameras collected (visuomotor: front wrist)"})
    image_size: int = field(default=64, metadata={"help": "camera image size, pixels"})
    steps_per_demo: float = field(default=10.0, metadata={"help": "training steps per demonstration, then clamped"})
    min_steps: int = field(default=500, metadata={"help": "fewest training steps of a point"})
    max_steps: int = field(default=5000, metadata={"help": "most training steps of a point"})
    hidden: tuple[int, ...] = field(default=(), metadata={"help": "MLP (and cnn head) hidden widths"})
    batch_size: int = field(default=0, metadata={"help": "windows per rank per step"})
    ranks: int = field(default=2, metadata={"help": "DDP ranks (torchrun processes)"})
    eval_robots: int = field(default=30, metadata={"help": "held-out robots evaluated (ids from the fleet's size up)"})
    eval_episodes: int = field(default=5, metadata={"help": "held-out episodes per evaluated robot"})
    seed: int = field(default=0, metadata={"help": "fleet seed"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "dask workers for collect and evaluate"})
    out: str = field(default="", metadata={"help": "directory for data, runs, evaluations and logs (runs/NAME)"})
    docs: str = field(default="docs/scaling.md", metadata={"help": "markdown file for the table"})
    media: str = field(default="docs/media", metadata={"help": "where the plots are written"})
    results_dir: str = field(default="experiments/results", metadata={"help": "where NAME.json is written"})

    def __post_init__(self):
        if self.setting not in SETTINGS:
            raise ValueError(f"--setting must be one of {', '.join(SETTINGS)}, got {self.setting!r}")
        for name, default in SETTINGS[self.setting].items():  # options left unset take the setting's value
            if getattr(self, name) in ((), "", 0):
                setattr(self, name, default)
        self.out = self.out or f"runs/{self.name}"
        for name in ("tasks", "robots", "episodes", "seeds"):
            if not getattr(self, name):
                raise ValueError(f"--{name} needs at least one value")
        check_options(self, ("fixed_episodes", "fixed_robots", "min_steps", "batch_size", "ranks", "eval_robots",
                             "eval_episodes", "workers", "image_size"), lambda value: value >= 1, "must be at least 1")
        check_options(self, ("robots", "episodes"), lambda values: min(values) >= 1, "must all be at least 1")
        check_options(self, ("steps_per_demo",), lambda value: value >= 0, "must not be negative")
        check_options(self, ("max_steps",), lambda value: value >= self.min_steps, "must be at least --min-steps")

    @property
    def name(self) -> str:
        """The results' name (``scaling``, ``scaling_visuomotor``), also of their docs section and plots."""
        return "scaling" if self.setting == "state" else f"scaling_{self.setting}"

    @property
    def section(self) -> str:
        return "scaling_data" if self.setting == "state" else f"scaling_data_{self.setting}"

    @property
    def fleet(self) -> tuple[int, int]:
        """Robots and episodes per robot collected: the most any point trains on."""
        return max(*self.robots, self.fixed_robots), max(*self.episodes, self.fixed_episodes)

    def points(self) -> dict[tuple[int, int], list[str]]:
        """``(robots, episodes per robot)`` of every point, each with the sweeps it belongs to."""
        points: dict[tuple[int, int], list[str]] = {}
        for k in sorted(self.robots):
            points.setdefault((k, self.fixed_episodes), []).append("robots")
        for n in sorted(self.episodes):
            points.setdefault((self.fixed_robots, n), []).append("episodes")
        return points

    def steps(self, demos: int) -> int:
        return min(self.max_steps, max(self.min_steps, round(self.steps_per_demo * demos)))
