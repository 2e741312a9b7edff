"""robofleet/Reach-v0: move the gripper to a point in the air."""

from __future__ import annotations

import numpy as np

from sim.envs.base import ArmEnv


class ReachEnv(ArmEnv):
    """Move the end-effector (the point between the fingertips) to a goal above the table.

    ## Action space
    ``Box(-1, 1, (5,), float32)`` in the default ``ee_delta`` control mode:

    | index | action                              | scale at 1.0 |
    |-------|-------------------------------------|--------------|
    | 0-2   | end-effector displacement x, y, z   | 2 cm         |
    | 3     | end-effector yaw change             | 0.15 rad     |
    | 4     | gripper: -1 open, +1 closed         | -            |

    With ``control_mode="joint_pos"`` it is ``Box(-1, 1, (7,))``: six joint targets
    scaled over each joint's range, then the gripper.

    ## Observation space
    A ``Dict``:

    | key                              | shape     | content                               |
    |----------------------------------|-----------|---------------------------------------|
    | observation.state                | (20,)     | see ``sim.envs.base`` (joints, gripper, end-effector pose) |
    | observation.environment_state    | (3,)      | goal position (world, m)              |
    | observation.images.<camera>      | (H, W, 3) | uint8 RGB, only for requested cameras |

    ## Cameras
    ``front`` is fixed across the table, facing the arm: it sees the arm, the table
    and the goal marker (a translucent green sphere whose radius is the goal
    tolerance). ``wrist`` rides on the hand and looks down past the fingertips at
    the table below and ahead of the gripper. At reset, at 96 x 96 (480 resets of
    24 robots; "sees" = at least 4 pixels): front sees the goal in 99.8% of resets,
    wrist in 70% (not goals above, beside or behind the hand). A goal just behind
    the wrist can be hidden from both by the hand (about 0.3% of resets, factory
    robots, whose marker is smallest). ``side`` (see ``robofleet/Push-v0``) sees the
    goal in 99.6%, and every goal is in view of at least one of the three cameras.

    ## Reward
    Minus the distance from the end-effector to the goal, in metres.

    ## Success
    ``info["is_success"]`` is true when the end-effector is within the robot's
    ``goal_tolerance`` of the goal. The episode terminates on success
    (``terminate_on_success=True``) and is truncated after 60 steps (3 s at 20 Hz).

    ## Reset distribution
    The arm starts at its home pose with uniform joint noise of +-0.08 rad and an open
    gripper. The goal is uniform over the usable table area, 5 to 30 cm above the top.

    ## Arguments
    ``profile`` (a ``RobotProfile`` or its dict; robot 0 of fleet seed 0 by default),
    ``cameras`` (subset of ``("front", "wrist", "side")``), ``image_size`` (96),
    ``control_mode`` (``"ee_delta"`` or ``"joint_pos"``), ``render_mode``
    (``None`` or ``"rgb_array"``), ``terminate_on_success`` (True).
    """

    environment_state_names = ("goal_x", "goal_y", "goal_z")

    def _reset_task(self) -> None:
        goal_xy = self.sample_table_point(margin=0.0)
        goal_z = self.table_height + self.np_random.uniform(0.05, 0.3)
        self.model.site_pos[self.goal_site] = [*goal_xy, goal_z]

    def _environment_state(self) -> np.ndarray:
        return self.goal_position.copy()

    def _task_distance(self) -> float:
        return float(np.linalg.norm(self.ee_position - self.goal_position))
