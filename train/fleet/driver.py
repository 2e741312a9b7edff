"""A trained policy driving a group of robots in lockstep: one batched forward pass for all of them."""

from __future__ import annotations

import numpy as np

from train.policies.policy import Policy


class FleetDriver:
    """Runs ``policy`` on a batch of robots as evaluate does: observation history, action chunks,
    ``n_action_steps`` of each executed before the next prediction.

    Each robot keeps its own history and its own place in its chunk, so one robot can start a
    new episode (``restart``) while the others carry on. A step predicts fresh chunks for the
    robots whose chunk is used up, in one batch; when every robot starts together (``reset``)
    they stay in step and every prediction is one pass over the whole group.

    With ``measure=True`` it also predicts a fresh chunk for every robot at every step and
    reports, per robot, how far the fresh first action is from the planned one it executes (the
    largest difference over action dimensions): the ``uncertainty`` gate's disagreement
    (train/fleet/gates.py).
    """

    def __init__(self, policy: Policy, measure: bool = False):
        self.policy, self.measure = policy, measure
        self.reset()

    def reset(self) -> None:
        """A new episode for every robot of the batch."""
        self.history: dict[str, np.ndarray] | None = None  # name -> [B, n_obs_steps, ...]
        self.plan: np.ndarray | None = None  # [B, chunk, A], the chunks being executed
        self.age: np.ndarray | None = None  # [B], actions of each robot's chunk executed so far
        self.starting: np.ndarray | None = None  # [B], robots whose next observation begins an episode

    def restart(self, robot: int) -> None:
        """A new episode for ``robot``: its next observation starts its history and gets a fresh chunk."""
        if self.starting is not None:  # before the first step every robot starts anyway
            self.starting[robot] = True

    def __call__(self, observations: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Actions [B, A] for the batched ``observations`` and the disagreement [B] (zeros unless measured)."""
        starting = self._observe(observations)
        robots = len(starting)
        due = starting | (self.age >= self.policy.spec.n_action_steps)
        disagreement = np.zeros(robots)
        rows = np.arange(robots) if self.measure else np.flatnonzero(due)
        if rows.size:
            fresh = self.policy.predict_windows({name: history[rows] for name, history in self.history.items()})
            if self.plan is None:
                self.plan = np.zeros((robots, *fresh.shape[1:]), dtype=fresh.dtype)
            if self.measure:
                planned = ~starting & (self.age < self.plan.shape[1])
                index = np.flatnonzero(planned)
                disagreement[index] = np.abs(fresh[index, 0] - self.plan[index, self.age[index]]).max(axis=-1)
            renewed = np.flatnonzero(due[rows])
            self.plan[rows[renewed]] = fresh[renewed]
        self.age[due] = 0
        action = self.plan[np.arange(robots), self.age]
        self.age += 1
        return action, disagreement

    def _observe(self, observations: dict[str, np.ndarray]) -> np.ndarray:
        """Add the step's frames to every robot's history; which robots began an episode with them."""
        window = self.policy.spec.n_obs_steps
        values = {name: self.policy.frame(name, observations[name]) for name in self.policy.spec.features}
        robots = len(next(iter(values.values())))
        if self.history is None:
            self.history = {name: np.repeat(value[:, None], window, axis=1) for name, value in values.items()}
            self.age, self.starting = np.zeros(robots, dtype=int), np.ones(robots, dtype=bool)
        else:
            for name, value in values.items():
                past = self.history[name]
                self.history[name] = np.concatenate([past[:, 1:], value[:, None]], axis=1)
                # an episode's first frame pads the history, as Policy.observe does
                self.history[name][self.starting] = value[self.starting][:, None]
        starting, self.starting = self.starting, np.zeros(robots, dtype=bool)
        return starting
