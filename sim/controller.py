"""Turns actions into actuator targets for the arm.

Two control modes:

- ``ee_delta`` (default): the action moves an end-effector *target* by a bounded
  step in position and yaw; the gripper keeps pointing down. A few iterations of
  damped least-squares IK on the end-effector site's Jacobian (on a scratch copy of
  the kinematics, warm-started from the last solution) turn the target pose into
  absolute joint targets for the arm's position actuators. The target stays on a
  leash of a few centimetres around the measured pose, so an arm blocked by contact
  does not wind up.
- ``joint_pos``: the action is the absolute joint position target of every arm
  joint, scaled to [-1, 1] over the joint's range.

In both modes the last action entry commands the gripper: -1 fully open,
+1 fully closed (the fingers are force-limited, so closing on an object grips it).
"""

from __future__ import annotations

import mujoco
import numpy as np

from sim.model import ARM_JOINTS

CONTROL_MODES = ("ee_delta", "joint_pos")
MAX_POSITION_STEP = 0.02  # metres per control step at |action| = 1
MAX_YAW_STEP = 0.15  # radians per control step at |action| = 1
IK_DAMPING = 0.05
IK_ITERATIONS = 3
IK_TOLERANCE = 1e-4  # metres / radians: stop iterating below this pose error
POSITION_LEASH = 0.05  # metres the target may lead the measured end-effector
YAW_LEASH = 0.3  # radians
GRIPPER_OPEN = 0.05  # finger joint target when open, metres from the centre line


def yaw_of(rotation: np.ndarray) -> float:
    """Heading of the tool's x axis in the world xy-plane."""
    return float(np.arctan2(rotation[1, 0], rotation[0, 0]))


class ArmController:
    """Writes ``data.ctrl`` for the arm and gripper from a normalised action."""

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, mode: str, workspace: np.ndarray):
        if mode not in CONTROL_MODES:
            raise ValueError(f"unknown control mode {mode!r}; choose from {', '.join(CONTROL_MODES)}")
        self.model, self.data, self.mode = model, data, mode
        self.workspace = workspace  # (2, 3): low and high corner for the end-effector
        joint_ids = [model.joint(name).id for name in ARM_JOINTS]
        self.qpos_idx = model.jnt_qposadr[joint_ids]
        self.dof_idx = model.jnt_dofadr[joint_ids]
        self.joint_range = model.jnt_range[joint_ids]
        self.arm_actuators = np.array([model.actuator(name).id for name in ARM_JOINTS])
        self.gripper_actuator = model.actuator("gripper").id
        self.site_id = model.site("ee").id
        self._jacobian = np.zeros((6, model.nv))
        self._error = np.zeros(6)
        self._site_quat = np.zeros(4)
        self._local_rotation = np.zeros(3)
        self._step = np.zeros(6)
        self._damping = IK_DAMPING**2 * np.eye(6)
        self._scratch = mujoco.MjData(model)  # kinematics of candidate joint targets
        self.target_position = np.zeros(3)
        self.target_yaw = 0.0
        self.joint_target = np.zeros(len(ARM_JOINTS))

    @property
    def action_names(self) -> tuple[str, ...]:
        if self.mode == "ee_delta":
            return ("ee_dx", "ee_dy", "ee_dz", "ee_dyaw", "gripper")
        return (*(f"{joint}_target" for joint in ARM_JOINTS), "gripper")

    @property
    def action_dim(self) -> int:
        return len(self.action_names)

    def apply(self, action: np.ndarray) -> None:
        """Set actuator targets for one control step."""
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        if self.mode == "ee_delta":
            targets = self._move_target(action[:3] * MAX_POSITION_STEP, action[3] * MAX_YAW_STEP)
        else:
            low, high = self.joint_range.T
            targets = low + (action[:-1] + 1.0) * 0.5 * (high - low)
        self.data.ctrl[self.arm_actuators] = targets
        self.data.ctrl[self.gripper_actuator] = (1.0 - action[-1]) * 0.5 * GRIPPER_OPEN

    def hold(self) -> None:
        """Make the measured pose the target, gripper open (called at reset, after mj_forward)."""
        self.target_position = self.data.site_xpos[self.site_id].copy()
        self.target_yaw = yaw_of(self.data.site_xmat[self.site_id].reshape(3, 3))
        self.joint_target = self.data.qpos[self.qpos_idx].copy()
        self.data.ctrl[self.arm_actuators] = self.joint_target
        self.data.ctrl[self.gripper_actuator] = GRIPPER_OPEN

    def _move_target(self, position_step: np.ndarray, yaw_step: float) -> np.ndarray:
        measured_position = self.data.site_xpos[self.site_id]
        measured_yaw = yaw_of(self.data.site_xmat[self.site_id].reshape(3, 3))
        lead = np.clip(self.target_position + position_step - measured_position, -POSITION_LEASH, POSITION_LEASH)
        self.target_position = np.clip(measured_position + lead, *self.workspace)
        yaw_lead = np.clip(self.target_yaw + yaw_step - measured_yaw, -YAW_LEASH, YAW_LEASH)
        self.target_yaw = measured_yaw + yaw_lead
        self.joint_target = self._solve_ik(self.joint_target)
        return self.joint_target

    def _solve_ik(self, q: np.ndarray) -> np.ndarray:
        """Joint positions near ``q`` that put the end-effector at the target pose."""
        half_yaw = 0.5 * self.target_yaw
        desired_quat = np.array([np.cos(half_yaw), 0.0, 0.0, np.sin(half_yaw)])  # pointing down, yawed
        scratch, error = self._scratch, self._error
        for _ in range(IK_ITERATIONS):
            scratch.qpos[self.qpos_idx] = q
            mujoco.mj_kinematics(self.model, scratch)
            mujoco.mj_comPos(self.model, scratch)
            error[:3] = self.target_position - scratch.site_xpos[self.site_id]
            mujoco.mju_mat2Quat(self._site_quat, scratch.site_xmat[self.site_id])
            mujoco.mju_subQuat(self._local_rotation, desired_quat, self._site_quat)  # in the site's frame
            mujoco.mju_rotVecQuat(error[3:], self._local_rotation, self._site_quat)  # in the world frame
            if np.abs(error).max() < IK_TOLERANCE:
                break
            mujoco.mj_jacSite(self.model, scratch, self._jacobian[:3], self._jacobian[3:], self.site_id)
            jacobian = self._jacobian[:, self.dof_idx]
            damped = jacobian @ jacobian.T + self._damping
            mujoco.mju_cholFactor(damped, 0.0)  # symmetric positive definite: Cholesky is enough
            mujoco.mju_cholSolve(self._step, damped, error)
            q = np.clip(q + jacobian.T @ self._step, *self.joint_range.T)
        return q
