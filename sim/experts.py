"""Scripted experts: closed-loop controllers that solve each task from observations.

Every expert has ``reset(seed)`` and ``__call__(observation) -> action``. They read
only what a policy reads (the noisy observation dict) plus the robot's profile, and
they draw a few style parameters per episode from ``seed`` (speed, clearance height,
waypoints, action noise), so that demonstrations are varied rather than one fixed path.

Driving, an expert is a phase machine: what it does depends on the phase it remembers
(a grasp it started, a waypoint it chose). ``label_state(observation)`` is the same expert as
a function of the state alone, for labelling states it did not reach itself (DAgger): the
phase is read from the observation and the exploration noise is left out.
"""

from __future__ import annotations

import numpy as np

from sim.controller import MAX_POSITION_STEP, MAX_YAW_STEP
from sim.fleet import RobotProfile

FINGER_HALF_WIDTH = 0.012  # half-extent of the closed fingers, used as a pusher


def _wrap(angle: float, period: float) -> float:
    """``angle`` wrapped into [-period/2, period/2)."""
    return (angle + period / 2) % period - period / 2


def _yaw_from_quaternion(q: np.ndarray) -> float:
    w, x, y, z = q
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def squaring_turn(observation: dict) -> float:
    """The yaw turn (rad, within +-pi/4) that squares the fingers with the cube's faces, as the cube experts
    turn: a cube has four faces, so near +-pi/4 the shortest turn flips from one way to the other."""
    ee_yaw = _yaw_from_quaternion(observation["observation.state"][16:20])
    cube_yaw = _yaw_from_quaternion(observation["observation.environment_state"][3:7])
    return _wrap(cube_yaw - ee_yaw, np.pi / 2)


class ScriptedExpert:
    """Shared parts: observation parsing, proportional moves and per-episode style."""

    def __init__(self, profile: RobotProfile):
        self.profile = profile
        self.table = profile.table_height
        self.half = profile.object_half_size
        self.reset(0)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.speed = self.rng.uniform(0.6, 1.0)
        self.noise = self.rng.uniform(0.03, 0.12)
        self.clearance = self.rng.uniform(0.05, 0.1)
        self.phase = "start"

    def _parse(self, observation: dict) -> None:
        state = observation["observation.state"]
        self.ee = state[13:16].astype(np.float64)
        self.ee_yaw = _yaw_from_quaternion(state[16:20])
        self.gripper_width = float(state[12])
        self.env_state = observation["observation.environment_state"].astype(np.float64)

    def label_state(self, observation: dict) -> np.ndarray:
        """The action for ``observation`` read from the state alone: the same label whatever came before.
        (Not ``label``: collect relabels the frames of an agent that has one, train/dagger.py's student.)"""
        self._parse(observation)
        self.phase = self._phase_of_state()
        noise, self.noise = self.noise, 0.0
        try:
            return self(observation)
        finally:
            self.noise = noise

    def _phase_of_state(self) -> str:
        """The phase the state shows (``label_state``); the parsed observation is current."""
        raise NotImplementedError

    def _move(self, target: np.ndarray, gain: float = 0.8, gripper: float = -1.0, yaw_error: float = 0.0):
        """Action that moves the end-effector a fraction ``gain`` of the way to ``target``."""
        step = (target - self.ee) * gain / MAX_POSITION_STEP
        step = np.clip(step, -self.speed, self.speed)
        # Exploration noise shrinks as the target gets close, so precision is kept.
        closeness = min(1.0, float(np.linalg.norm(target - self.ee)) / 0.1)
        step = step + self.rng.normal(0.0, self.noise * closeness, size=3)
        yaw = np.clip(yaw_error / MAX_YAW_STEP, -1.0, 1.0)
        return np.array([*np.clip(step, -1.0, 1.0), yaw, gripper], dtype=np.float32)


class ReachExpert(ScriptedExpert):
    """Flies to the goal, sometimes through a random waypoint first."""

    def __call__(self, observation: dict) -> np.ndarray:
        self._parse(observation)
        goal = self.env_state[:3]
        if self.phase == "start":
            use_waypoint = self.rng.uniform() < 0.5
            midpoint = (self.ee + goal) / 2 + self.rng.uniform(-0.06, 0.06, size=3)
            midpoint[2] = max(midpoint[2], self.table + 0.05)
            self.waypoint = midpoint if use_waypoint else None
            self.phase = "reach"
        if self.waypoint is not None and np.linalg.norm(self.waypoint - self.ee) < 0.03:
            self.waypoint = None
        return self._move(goal if self.waypoint is None else self.waypoint)

    def _phase_of_state(self) -> str:
        self.waypoint = None  # a waypoint is a choice, not something the state shows: straight to the goal
        return "reach"


class _CubeExpert(ScriptedExpert):
    def _parse(self, observation: dict) -> None:
        super()._parse(observation)
        self.cube = self.env_state[:3]
        self.cube_yaw = _yaw_from_quaternion(self.env_state[3:7])
        self.goal = self.env_state[7:10]

    def _yaw_to_cube(self) -> float:
        """Yaw change that squares the fingers with the cube's faces (see ``squaring_turn``)."""
        return _wrap(self.cube_yaw - self.ee_yaw, np.pi / 2)


class PushExpert(_CubeExpert):
    """Closes the gripper, gets behind the cube on the goal line and pushes along it.

    If the cube slips off the line, the expert lifts, goes round and lines up again.
    """

    def _line(self) -> tuple[np.ndarray, float, float, float]:
        """The goal line through the cube: its direction, the cube's distance to the goal, and where the
        fingers are along the line and off it."""
        to_goal = self.goal[:2] - self.cube[:2]
        distance = float(np.linalg.norm(to_goal))
        direction = to_goal / max(distance, 1e-6)
        relative = self.ee[:2] - self.cube[:2]
        along = float(relative @ direction)
        return direction, distance, along, float(np.linalg.norm(relative - along * direction))

    def _push_z(self) -> float:
        return self.table + max(self.half, 0.015)

    def _lined_up(self) -> bool:
        """Whether the fingers are behind the cube on the goal line."""
        _, _, along, lateral = self._line()
        return along < -self.half and lateral < 0.5 * self.half + 0.005

    def __call__(self, observation: dict) -> np.ndarray:
        self._parse(observation)
        direction, distance, along, _ = self._line()
        standoff = self.half + FINGER_HALF_WIDTH + 0.015
        push_z = self._push_z()
        travel_z = self.table + 2 * self.half + self.clearance

        if self.phase == "push" and not self._lined_up():
            self.phase = "approach"
        if self.phase in ("start", "approach"):
            self.phase = "approach"
            behind = np.array([*(self.cube[:2] - standoff * direction), push_z])
            horizontal_gap = float(np.linalg.norm(self.ee[:2] - behind[:2]))
            if horizontal_gap > 0.015:
                # Clear the cube first, then travel at height, then come down behind it.
                needs_lift = self.ee[2] < travel_z - 0.02 and along > -standoff + 0.01
                target = np.array([*(self.ee[:2] if needs_lift else behind[:2]), travel_z])
                return self._move(target, gripper=1.0)
            if self.ee[2] > push_z + 0.01:
                return self._move(behind, gripper=1.0)
            self.phase = "push"
        # Aim past the contact point along the goal line; slow down near the goal.
        reach = min(distance, 0.04)
        target = np.array([*(self.cube[:2] + (reach - standoff + 0.012) * direction), push_z])
        return self._move(target, gain=0.6, gripper=1.0)

    def _phase_of_state(self) -> str:
        """Pushing if the fingers are down behind the cube on the goal line, else approaching."""
        return "push" if self._lined_up() and self.ee[2] <= self._push_z() + 0.01 else "approach"


class PickPlaceExpert(_CubeExpert):
    """Hovers over the cube, squares up, descends, grasps, lifts, carries, places.

    If the cube falls out of the hand, it starts over from the hover. If the fingers already hold
    the cube when it starts (or while it is still on its way to the hover), as when it takes a robot
    over from a policy that was carrying it, it lifts and carries on instead of letting go.
    """

    GRASP_STEPS = 6

    def _fingers_closed(self) -> bool:
        """Whether the fingers are closed on something the cube's size (an open gripper is wider)."""
        return self.gripper_width < 2 * self.half + 0.012

    def _carry_height(self) -> float:
        """Height of the cube's centre while it travels: clear of the table."""
        return self.table + 2 * self.half + 0.03

    def _cube_in_hand(self) -> bool:
        """Whether the cube is between the fingers (fingers closed to nothing missed it)."""
        return bool(np.linalg.norm(self.cube - self.ee) < self.half + 0.02 and self.gripper_width > 1.2 * self.half)

    def _hover_point(self) -> np.ndarray:
        return np.array([*self.cube[:2], self.cube[2] + self.half + self.clearance])

    def _grasp_point(self) -> np.ndarray:
        return np.array([*self.cube[:2], max(self.cube[2], self.table + 0.012)])

    def _phase_of_state(self) -> str:
        """Lifting or carrying a held cube; over the cube: descending (squaring on the way, whatever the yaw
        error), or grasping near the bottom; else going to the hover point. Wider than the driving expert, which
        squares up before it descends: policies descend unsquared (median 0.5 rad off) and still grasp, and a
        label must not send a policy that is on its way to a grasp back up."""
        if self._cube_in_hand() and self._fingers_closed():
            return "carry" if self.cube[2] > self._carry_height() - self.half - 0.005 else "lift"
        over_cube = np.linalg.norm(self._hover_point()[:2] - self.ee[:2]) < 0.6 * self.half
        if over_cube and self.ee[2] <= self._hover_point()[2] + 0.01:
            if self.ee[2] < self._grasp_point()[2] + 0.012:
                self.grasp_count = 0
                return "grasp"
            return "descend"
        return "hover"

    def __call__(self, observation: dict) -> np.ndarray:
        self._parse(observation)
        hover, grasp_point = self._hover_point(), self._grasp_point()
        cube_in_hand = self._cube_in_hand()
        if self.phase in ("lift", "carry") and not cube_in_hand:
            self.phase = "hover"
        if self.phase in ("start", "hover", "descend") and cube_in_hand and self._fingers_closed():
            self.phase = "lift"
        if self.phase == "start":
            self.phase = "hover"

        if self.phase == "hover":
            yaw_error = self._yaw_to_cube()
            if np.linalg.norm(hover[:2] - self.ee[:2]) < 0.01 and abs(yaw_error) < 0.05:
                self.phase = "descend"
            target = hover if self.ee[2] > self.cube[2] + self.half else np.array([*self.ee[:2], hover[2]])
            return self._move(target, yaw_error=yaw_error)
        if self.phase == "descend":
            if abs(self.ee[2] - grasp_point[2]) < 0.006:
                self.phase, self.grasp_count = "grasp", 0
            return self._move(grasp_point, gain=0.7, yaw_error=self._yaw_to_cube())
        if self.phase == "grasp":
            self.grasp_count += 1
            if self.grasp_count >= self.GRASP_STEPS:
                self.phase = "lift"
            return self._move(grasp_point, gripper=1.0)

        in_hand_offset = self.ee - self.cube
        lift_z = self._carry_height()
        if self.phase == "lift":
            if self.cube[2] > lift_z - self.half - 0.005:
                self.phase = "carry"
            target = np.array([*self.ee[:2], max(lift_z, self.goal[2]) + in_hand_offset[2] + 0.01])
            return self._move(target, gripper=1.0)
        # carry: bring the cube's centre to the goal, staying high until above it.
        target = self.goal + in_hand_offset
        if np.linalg.norm(self.goal[:2] - self.cube[:2]) > 0.02:
            target[2] = max(target[2], lift_z + in_hand_offset[2])
        return self._move(target, gain=0.7, gripper=1.0)


class StackExpert(PickPlaceExpert):
    """Picks the top cube, carries it over the base cube, sets it down, lets go, backs off.

    The place goal is the base cube's top, read from the observation every step.
    """

    RELEASE_STEPS = 4

    def _parse(self, observation: dict) -> None:
        ScriptedExpert._parse(self, observation)
        self.cube = self.env_state[:3]
        self.cube_yaw = _yaw_from_quaternion(self.env_state[3:7])
        self.goal = self.env_state[7:10] + [0.0, 0.0, 2 * self.half + 0.004]

    def _carry_height(self) -> float:
        return self.table + 3 * self.half + 0.03  # the moving cube clears the base cube

    def _phase_of_state(self) -> str:
        """Once the cube sits on the base: letting go while the fingers hold it, then backing off."""
        if np.linalg.norm(self.cube - self.goal) < 0.006:
            if self._fingers_closed():
                self.release_count = 0
                return "release"
            return "retreat"
        return super()._phase_of_state()

    def __call__(self, observation: dict) -> np.ndarray:
        self._parse(observation)
        if self.phase == "carry" and np.linalg.norm(self.cube - self.goal) < 0.006:
            self.phase, self.release_count = "release", 0
        if self.phase == "release":
            self.release_count += 1
            if self.release_count >= self.RELEASE_STEPS:
                self.phase = "retreat"
            return self._move(self.ee, gripper=-1.0)
        if self.phase == "retreat":
            return self._move(self.ee + [0.0, 0.0, 0.05], gripper=-1.0)
        return super().__call__(observation)
