"""A trained policy driving a group of robots in lockstep: one forward pass a step for all of them."""

from __future__ import annotations

import numpy as np

from train.policies.policy import Policy


class FleetDriver:
    """Runs ``policy`` on a batch of robots as evaluate does: observation history, action chunks,
    ``n_action_steps`` of each executed before the next prediction.

    With ``measure=True`` it also predicts a fresh chunk at every step and reports, per robot,
    how far the fresh first action is from the planned one it executes (the largest difference
    over action dimensions): the ``uncertainty`` gate's disagreement (train/fleet/gates.py).
    """

    def __init__(self, policy: Policy, measure: bool = False):
        self.policy, self.measure = policy, measure
        self.reset()

    def reset(self) -> None:
        """A new episode for every robot of the batch."""
        self.policy.reset()
        self.plan: np.ndarray | None = None  # [B, chunk, A], the chunk being executed
        self.age = 0  # actions of the plan executed so far

    def __call__(self, observations: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Actions [B, A] for the batched ``observations`` and the disagreement [B] (zeros unless measured)."""
        self.policy.observe(observations)
        due = self.plan is None or self.age >= self.policy.spec.n_action_steps
        fresh = self.policy.predict_from_history() if due or self.measure else None
        disagreement = np.zeros(len(fresh if fresh is not None else self.plan))
        if self.measure and self.plan is not None and self.age < self.plan.shape[1]:
            disagreement = np.abs(fresh[:, 0] - self.plan[:, self.age]).max(axis=-1)
        if due:
            self.plan, self.age = fresh, 0
        action = self.plan[:, self.age]
        self.age += 1
        return action, disagreement
