"""robofleet/Push-v0: push a cube into a goal region on the table."""

from __future__ import annotations

import numpy as np

from sim.envs.cube import CubeEnv


class PushEnv(CubeEnv):
    """Push a cube across the table until its centre lies inside a goal region.

    ## Action space
    As ``robofleet/Reach-v0``: ``Box(-1, 1, (5,))`` end-effector displacement
    (2 cm per step), yaw change (0.15 rad per step) and gripper (-1 open, +1 closed);
    or ``Box(-1, 1, (7,))`` with ``control_mode="joint_pos"``.

    ## Observation space
    | key                              | shape     | content                                            |
    |----------------------------------|-----------|----------------------------------------------------|
    | observation.state                | (20,)     | joints, gripper, end-effector pose (``sim.envs.base``) |
    | observation.environment_state    | (10,)     | cube position (3), cube quaternion w,x,y,z (4), goal position (3) |
    | observation.images.<camera>      | (H, W, 3) | uint8 RGB, only for requested cameras              |

    ## Cameras
    ``front`` is fixed across the table, facing the arm: it sees the arm, the table,
    the cube and the goal marker (a translucent green sphere whose radius is the goal
    tolerance). ``wrist`` rides on the hand and looks down past the fingertips at
    the table below and ahead of the gripper. At reset, at 96 x 96 (480 resets of
    24 robots; "sees" = at least 4 pixels): front sees the cube and the goal in every
    reset (a factory cube covers about 15 pixels, a warehouse box 60); wrist sees the
    cube in 99.4% and the goal in 99.6% (not the table's far corners), with 4-5x the
    pixels. ``side`` is fixed beside the table, looking across it from the arm's right:
    it sees the table, the cube, the goal and the arm in profile, and so measures the
    distance along the front camera's line of sight. It sees the cube and the goal in
    every reset.

    ## Reward
    Minus (cube-to-goal distance in the plane + 0.5 x gripper-to-cube distance), metres.

    ## Success
    ``info["is_success"]`` is true when the cube's centre is within the robot's
    ``goal_tolerance`` of the goal in the table plane. Terminates on success; truncated
    after 200 steps (10 s at 20 Hz).

    ## Reset distribution
    Arm at home with +-0.08 rad joint noise. The cube rests on the table at a uniform
    position and yaw; the goal is a uniform table point at least 10 cm away.

    ## Arguments
    As ``robofleet/Reach-v0``. The robot's profile sets the cube's size, mass and
    friction, the table's friction and height, and the goal tolerance.
    """


    def _reset_task(self) -> None:
        _, goal_xy = self._place_object_and_goal_xy()
        self.model.site_pos[self.goal_site] = [*goal_xy, self.table_height + self.profile.object_half_size]

    def _task_distance(self) -> float:
        return float(np.linalg.norm(self.object_position[:2] - self.goal_position[:2]))
