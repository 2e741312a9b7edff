"""Gates: which deployed robots ask the supervisor for help, and how urgently.

A gate reads what the fleet sees of the robots one worker steps in lockstep (``Signals``,
one entry per robot) and gives each a priority: 0 means the robot carries on alone; above 0
it asks for help, and a free operator takes the asking robot with the highest priority
(train/fleet/operators.py). Gates never see what the supervisor does: they read the task's
own progress signal (its reward) and the policy's own predictions.

- ``random``: asks at random, ``random_rate`` of the steps: the baseline allocation.
- ``stall``: the task is not moving. The reward has not beaten its episode best by
  ``min_progress`` for ``stall_steps`` steps, or it has fallen ``regress`` below that best
  (a cube dropped or knocked away). Priority grows with how long or how far.
- ``uncertainty``: the policy disagrees with itself. Each step the policy predicts a fresh
  action chunk; its first action is compared with the action the policy is executing from
  the chunk it predicted earlier for this same step (the largest difference over action
  dimensions, in the action's own units: the controller's [-1, 1]). On states like its
  demonstrations, successive predictions agree (what ACT's temporal ensembling relies on);
  off them, they swing. It needs no ensemble and no mixture head, so it works for every
  policy kind; the price is one forward pass a step instead of one a chunk.
- ``fleet``: Fleet-DAgger's priority order, by what a human supervisor would want to hear
  about first: a task going backwards, then a stalled one, then an uncertain one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np


@dataclass
class GateOptions:
    """The gates' thresholds; ``train/fleet_learn.py`` takes them as options of the same names."""

    stall_steps: int = field(default=25, metadata={
        "help": "stall gate: steps without --min-progress in the reward before a robot asks"})
    min_progress: float = field(default=0.005, metadata={
        "help": "stall gate: a reward gain that counts as progress (metres for the built-in tasks)"})
    regress: float = field(default=0.04, metadata={
        "help": "stall gate: a fall of the reward below its episode best that asks at once (a dropped cube)"})
    uncertainty: float = field(default=0.4, metadata={
        "help": "uncertainty gate: the policy's fresh action against its planned one (action units, [-1, 1])"})
    random_rate: float = field(default=0.02, metadata={"help": "random gate: the share of steps a robot asks"})

    def __post_init__(self):
        for option in fields(GateOptions):
            if not getattr(self, option.name) > 0:
                raise ValueError(f"--{option.name.replace('_', '-')} must be positive")
        if self.random_rate > 1:
            raise ValueError("--random-rate is a share of the steps: at most 1")

    def gate_options(self) -> GateOptions:
        """The thresholds alone (of a config that extends these options)."""
        return GateOptions(**{option.name: getattr(self, option.name) for option in fields(GateOptions)})


@dataclass
class Signals:
    """What the gates read, one entry per robot; ``ProgressTracker`` keeps the reward parts."""

    since_progress: np.ndarray  # steps since the reward last beat its episode best by min_progress
    regress: np.ndarray  # how far the reward is below its episode best
    disagreement: np.ndarray  # the policy against itself (0 where not measured)
    draw: np.ndarray  # uniform draws in [0, 1) from the round's seed, for the random gate


def random_gate(signals: Signals, options: GateOptions) -> np.ndarray:
    """Asks on a random ``random_rate`` of the steps."""
    return np.where(signals.draw < options.random_rate, 1.0 - signals.draw, 0.0)


def stall_gate(signals: Signals, options: GateOptions) -> np.ndarray:
    """Asks when the task has not progressed for ``stall_steps`` or has gone back by ``regress``."""
    stalled = signals.since_progress / options.stall_steps
    fallen = signals.regress / options.regress
    return np.where((stalled >= 1) | (fallen >= 1), np.maximum(stalled, fallen), 0.0)


def uncertainty_gate(signals: Signals, options: GateOptions) -> np.ndarray:
    """Asks when the policy's fresh action and its planned one differ by ``uncertainty`` or more."""
    ratio = signals.disagreement / options.uncertainty
    return np.where(ratio >= 1, ratio, 0.0)


def fleet_gate(signals: Signals, options: GateOptions) -> np.ndarray:
    """Fleet-DAgger's order: a regressing task first (priority above 2), a stalled one next (above 1),
    an uncertain one last (up to 1)."""
    fallen = signals.regress >= options.regress
    stalled = signals.since_progress >= options.stall_steps
    uncertain = uncertainty_gate(signals, options)
    return np.select([fallen, stalled, uncertain > 0],
                     [2 + signals.regress / options.regress, 1 + np.tanh(signals.since_progress / options.stall_steps),
                      np.tanh(uncertain)], 0.0)


GATES = {"random": random_gate, "stall": stall_gate, "uncertainty": uncertainty_gate, "fleet": fleet_gate}
# The reference modes beside the gates: ``dagger`` has the expert label every visited state without acting
# (the label-hungry upper bound); ``bc`` spends the same help on whole demonstrations.
MODES = (*GATES, "dagger", "bc")
MEASURES_DISAGREEMENT = ("uncertainty", "fleet")


class ProgressTracker:
    """The reward parts of ``Signals`` for ``robots`` robots, updated every step."""

    def __init__(self, robots: int, options: GateOptions):
        self.options = options
        self.best = np.full(robots, -np.inf)  # the episode's best reward so far
        self.anchor = np.full(robots, -np.inf)  # the reward at the last progress
        self.since_progress = np.zeros(robots)
        self.regress = np.zeros(robots)

    def restart(self, robot: int) -> None:
        """Forget ``robot``'s history: a new episode, or a hand-back after help."""
        self.best[robot] = self.anchor[robot] = -np.inf
        self.since_progress[robot], self.regress[robot] = 0, 0.0

    def update(self, robot: int, reward: float) -> None:
        if reward >= self.anchor[robot] + self.options.min_progress:
            self.anchor[robot], self.since_progress[robot] = reward, 0
        else:
            self.since_progress[robot] += 1
        self.best[robot] = max(self.best[robot], reward)
        self.regress[robot] = self.best[robot] - reward
