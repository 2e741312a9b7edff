"""robofleet/PickPlace-v0: grasp a cube and place it at a goal in the air or on the table."""

from __future__ import annotations

import numpy as np

from sim.envs.cube import CubeEnv

AIR_GOAL_PROBABILITY = 0.5


class PickPlaceEnv(CubeEnv):
    """Grasp a cube and bring its centre to a goal that is either in the air or on the table.

    ## Action and observation spaces
    As ``robofleet/Push-v0``: the 5-D end-effector action (or 7-D with
    ``control_mode="joint_pos"``); ``observation.state`` (20), and
    ``observation.environment_state`` (10) = cube position (3), cube quaternion
    w,x,y,z (4), goal position (3); images only for requested cameras.

    ## Cameras
    As ``robofleet/Push-v0``'s, with the same measured views at reset, except that the
    wrist camera sees the goal in 93.5% of resets: it misses air goals level with the
    fingertips off to the side (the front and side cameras see every one). An air goal's
    distance along the front camera's line of sight is what ``side`` shows best.

    ## Reward
    Minus (cube-to-goal distance + 0.5 x gripper-to-cube distance), metres.

    ## Success
    ``info["is_success"]`` is true when the cube's centre is within the robot's
    ``goal_tolerance`` of the goal (in 3-D). Terminates on success; truncated after
    200 steps (10 s at 20 Hz).

    ## Reset distribution
    Arm at home with +-0.08 rad joint noise. The cube rests on the table at a uniform
    position and yaw. The goal is a uniform table point at least 10 cm away; with
    probability 0.5 it is lifted 5 to 20 cm into the air, otherwise the cube must be
    set down on the table there.

    ## Arguments
    As ``robofleet/Reach-v0``. The robot's profile sets the cube's size, mass and
    friction, the table's friction and height, and the goal tolerance.
    """


    def _reset_task(self) -> None:
        _, goal_xy = self._place_object_and_goal_xy()
        goal_z = self.table_height + self.profile.object_half_size
        if self.np_random.uniform() < AIR_GOAL_PROBABILITY:
            goal_z += self.np_random.uniform(0.05, 0.2)
        self.model.site_pos[self.goal_site] = [*goal_xy, goal_z]

    def _task_distance(self) -> float:
        return float(np.linalg.norm(self.object_position - self.goal_position))
