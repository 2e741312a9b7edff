"""Shared parts of the tasks that move a cube: its body, pose and placement."""

from __future__ import annotations

import numpy as np

from sim.envs.base import ArmEnv
from sim.model import cube_body_xml

MIN_START_TO_GOAL = 0.1  # metres between the cube's start and the goal, in the plane


class CubeEnv(ArmEnv):
    """An ``ArmEnv`` with one free cube on the table (named ``object``)."""

    environment_state_names = (
        "object_x", "object_y", "object_z", "object_qw", "object_qx", "object_qy", "object_qz",
        "goal_x", "goal_y", "goal_z",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        start = self.model.jnt_qposadr[self.model.joint("object").id]
        self.object_qpos = slice(start, start + 7)  # position (3) and quaternion (4) of the free joint

    def objects_xml(self) -> str:
        return cube_body_xml("object", self.profile)

    @property
    def object_position(self) -> np.ndarray:
        return self.data.qpos[self.object_qpos][:3]

    def _place_object_and_goal_xy(self) -> tuple[np.ndarray, np.ndarray]:
        """Put the cube on the table at a random pose; return its xy and a goal xy."""
        margin = self.profile.object_half_size + 0.02
        start_xy = self.sample_table_point(margin)
        goal_xy = self.sample_table_point(margin)
        while np.linalg.norm(goal_xy - start_xy) < MIN_START_TO_GOAL:
            goal_xy = self.sample_table_point(margin)
        yaw = self.np_random.uniform(-np.pi, np.pi)
        pose = self.data.qpos[self.object_qpos]
        pose[:2] = start_xy
        pose[2] = self.table_height + self.profile.object_half_size
        pose[3:] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
        return start_xy, goal_xy

    def _reward(self) -> float:
        reach = float(np.linalg.norm(self.ee_position - self.object_position))
        return -(self._task_distance() + 0.5 * reach)

    def _environment_state(self) -> np.ndarray:
        pose = self.data.qpos[self.object_qpos]
        return np.concatenate([pose[:3] + self._noise(3), pose[3:], self.goal_position])
