"""robofleet/Stack-v0: put one cube on top of another and let go."""

from __future__ import annotations

import numpy as np

from sim.envs.cube import CubeEnv
from sim.model import cube_body_xml

BASE_CUBE_RGBA = (0.2, 0.65, 0.3, 1.0)
STACK_HEIGHT_TOLERANCE = 0.01  # metres between the top cube's resting height and its goal


class StackEnv(CubeEnv):
    """Pick up the top cube and leave it resting on the base cube, gripper released.

    ## Action space
    As ``robofleet/Push-v0`` (5-D end-effector action, or 7-D with ``control_mode="joint_pos"``).

    ## Observation space
    | key                              | shape     | content                                            |
    |----------------------------------|-----------|----------------------------------------------------|
    | observation.state                | (20,)     | joints, gripper, end-effector pose (``sim.envs.base``) |
    | observation.environment_state    | (14,)     | top cube position (3) and quaternion w,x,y,z (4), base cube position (3) and quaternion (4) |
    | observation.images.<camera>      | (H, W, 3) | uint8 RGB, only for requested cameras              |

    ## Cameras
    ``front`` is fixed across the table, facing the arm: it sees the arm, the table,
    both cubes and the goal marker (a translucent green sphere whose radius is the
    goal tolerance, centred where the top cube must come to rest). ``wrist`` rides
    on the hand and looks down past the fingertips at the table below and ahead of
    the gripper. At reset, at 96 x 96 (480 resets of 24 robots; "sees" = at least
    4 pixels): front sees both cubes and the goal in every reset; wrist sees the top
    cube in 99.4%, the base cube in 99.6% and the goal in 99.4% (not the table's far
    corners), with 4-5x the pixels.
    ``side`` (see ``robofleet/Push-v0``) sees both cubes and the goal in every reset.

    ## Reward
    Minus (top cube's distance to the spot on top of the base cube + 0.5 x gripper-to-cube
    distance), metres.

    ## Success
    ``info["is_success"]`` is true when the top cube's centre is within
    ``min(goal_tolerance, half size)`` of the base cube's centre in the plane, within
    1 cm of one cube height above it, and no finger touches it (released). Terminates
    on success; truncated after 250 steps (12.5 s at 20 Hz).

    ## Reset distribution
    Arm at home with +-0.08 rad joint noise. Both cubes (same size, from the profile)
    rest on the table at uniform positions and yaws, at least 10 cm apart.

    ## Arguments
    As ``robofleet/Reach-v0``.
    """

    environment_state_names = (
        "object_x", "object_y", "object_z", "object_qw", "object_qx", "object_qy", "object_qz",
        "base_x", "base_y", "base_z", "base_qw", "base_qx", "base_qy", "base_qz",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        start = self.model.jnt_qposadr[self.model.joint("base_cube").id]
        self.base_qpos = slice(start, start + 7)
        self.finger_geoms = {self.model.geom("finger_left").id, self.model.geom("finger_right").id}
        self.object_geom = self.model.geom("object").id

    def objects_xml(self) -> str:
        return super().objects_xml() + "\n" + cube_body_xml("base_cube", self.profile, rgba=BASE_CUBE_RGBA)

    def _reset_task(self) -> None:
        _, base_xy = self._place_object_and_goal_xy()
        yaw = self.np_random.uniform(-np.pi, np.pi)
        base = self.data.qpos[self.base_qpos]
        base[:3] = [*base_xy, self.table_height + self.profile.object_half_size]
        base[3:] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
        self.model.site_pos[self.goal_site] = self._stack_target()

    def _stack_target(self) -> np.ndarray:
        return self.data.qpos[self.base_qpos][:3] + [0.0, 0.0, 2 * self.profile.object_half_size]

    def _environment_state(self) -> np.ndarray:
        top, base = self.data.qpos[self.object_qpos], self.data.qpos[self.base_qpos]
        return np.concatenate([top[:3] + self._noise(3), top[3:], base[:3] + self._noise(3), base[3:]])

    def _task_distance(self) -> float:
        return float(np.linalg.norm(self.object_position - self._stack_target()))

    def _is_success(self) -> bool:
        offset = self.object_position - self._stack_target()
        centred = np.linalg.norm(offset[:2]) < min(self.profile.goal_tolerance, self.profile.object_half_size)
        return bool(centred and abs(offset[2]) < STACK_HEIGHT_TOLERANCE and not self._fingers_touch_cube())

    def _fingers_touch_cube(self) -> bool:
        for contact in self.data.contact[: self.data.ncon]:
            pair = {contact.geom1, contact.geom2}
            if self.object_geom in pair and pair & self.finger_geoms:
                return True
        return False
