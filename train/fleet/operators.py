"""The help budget and who gives the help: operators and the supervisor they relay.

The fleet has ``K`` operators (Fleet-DAgger's human supervisors). Each watches a fixed group
of robots (robot ``r`` belongs to group ``r mod K``, so the sites mix), and the robots of a
group are stepped in lockstep by one worker. An operator helps at most one of its robots at a
time, so at most ``K`` robots are ever helped at once across the fleet; it hands a robot back
after ``segment_steps`` expert steps (or when the episode ends), or, given
``min_segment_steps``, as soon as the robot's gate no longer asks once that many steps are
done (ThriftyDAgger hands back when the policy is sure again); it stops helping when its
share of the round's step cap is spent. Given a limit of hand-overs per episode, a robot
that has had them asks no more until its next episode: help that has not taken by then
seldom takes later. Fixed groups keep a round deterministic and its workers independent: no
robot waits for another worker's decisions. (Fleet-DAgger allocates
its supervisors over the whole fleet at every step; here a robot can only get its own group's
operator.)

The supervisor is an interface (``Supervisor``): ``take_over(robot, seed)`` at a hand-over and
``act(robot, observation)`` while it drives. ``ScriptedSupervisor`` plays the remote operator
with the task's scripted expert, which acts from the privileged state the policy never sees.
On real robots the same two calls would go to a teleoperation client.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from sim.fleet import RobotProfile
from sim.tasks import TaskSpec


def operator_groups(robots: list[int], operators: int) -> list[list[int]]:
    """The robots each of ``operators`` operators watches: robot ``r`` goes to group ``r mod operators``."""
    groups = [[robot for robot in robots if robot % operators == group] for group in range(operators)]
    return [group for group in groups if group]


def step_shares(cap: int, groups: int) -> list[int]:
    """``cap`` expert steps split over ``groups`` operators as evenly as whole steps go; they add up to ``cap``."""
    return [cap // groups + (group < cap % groups) for group in range(groups)]


class Operator:
    """One operator's budget over its group: whom it helps now, for how much longer, and what is left."""

    def __init__(self, steps_left: int, segment_steps: int, min_segment_steps: int | None = None):
        self.steps_left, self.segment_steps = steps_left, segment_steps
        self.min_segment_steps = segment_steps if min_segment_steps is None else min_segment_steps
        self.helping: int | None = None
        self.segment_left = 0
        self.handovers = 0

    def hand_back(self, priorities: np.ndarray, active: np.ndarray) -> int | None:
        """End the help that is over (its segment done, its gate clear after the minimum steps, its episode ended,
        or the steps spent); the robot handed back, which should get a fresh start before anyone asks again."""
        if self.helping is None:
            return None
        cleared = priorities[self.helping] <= 0 and self.segment_steps - self.segment_left >= self.min_segment_steps
        if self.segment_left == 0 or cleared or not active[self.helping] or not self.steps_left:
            return self.release()
        return None

    def choose(self, priorities: np.ndarray, active: np.ndarray) -> tuple[int | None, bool]:
        """The robot helped this step and whether the help starts now: the current one while its help lasts
        (``hand_back``), else the asking active robot of highest priority (the lowest index on a tie), if steps
        are left."""
        self.hand_back(priorities, active)
        if self.helping is not None:
            return self.helping, False
        asking = np.where(active & (priorities > 0), priorities, -np.inf)
        if self.steps_left == 0 or not np.isfinite(asking.max(initial=-np.inf)):
            return None, False
        self.helping, self.segment_left = int(np.argmax(asking)), self.segment_steps
        self.handovers += 1
        return self.helping, True

    def spend(self) -> None:
        """One expert step taken by the robot being helped."""
        self.steps_left -= 1
        self.segment_left -= 1

    def release(self) -> int | None:
        """Hand the robot back now (its episode ended); the robot that was helped."""
        robot, self.helping = self.helping, None
        return robot


class Supervisor(Protocol):
    """Who drives a robot when its operator takes over: a scripted expert here, a person on real robots."""

    def take_over(self, robot: int, seed: int) -> None: ...

    def act(self, robot: int, observation: dict) -> np.ndarray: ...

    def label(self, robot: int, observation: dict) -> np.ndarray:
        """The action the supervisor would take in this state, without acting or remembering (DAgger's labels)."""
        ...


class ScriptedSupervisor:
    """The task's scripted expert as the remote operator, one per robot of a group.

    A hand-over resets the expert (its phase machine starts again from what it observes), with
    ``seed`` fixing its style for the segment.
    """

    def __init__(self, spec: TaskSpec, profiles: list[RobotProfile]):
        self.experts = [spec.make_expert(profile) for profile in profiles]

    def take_over(self, robot: int, seed: int) -> None:
        self.experts[robot].reset(seed)

    def act(self, robot: int, observation: dict) -> np.ndarray:
        return np.asarray(self.experts[robot](observation), dtype=np.float32)

    def label(self, robot: int, observation: dict) -> np.ndarray:
        return np.asarray(self.experts[robot].label_state(observation), dtype=np.float32)
