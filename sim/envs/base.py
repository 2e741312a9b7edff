"""The shared machinery of every RoboFleet arm task.

``ArmEnv`` owns the model, the controller, the observation dict and the cameras;
a task subclass adds its objects, its reset distribution, its reward and its
success test. The observation ``observation.state`` is the same for every task:

| index  | observation.state                      | unit  |
|--------|----------------------------------------|-------|
| 0-5    | arm joint positions                    | rad   |
| 6-11   | arm joint velocities                   | rad/s |
| 12     | gripper opening (distance between fingers) | m |
| 13-15  | end-effector position (world)          | m     |
| 16-19  | end-effector orientation quaternion (w, x, y, z) | - |

Sensor noise from the robot's profile is added to the end-effector and object
positions in every observation. Bounds are physical: joint ranges, 100 rad/s, and
world positions within the 3 m floor (``WORLD_EXTENT``).
"""

from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from sim.controller import ArmController
from sim.fleet import RobotProfile, default_profile
from sim.model import ARM_JOINTS, build_model

CONTROL_FPS = 20
HOME_QPOS = np.array([0.0, 0.4393, 0.2166, 0.0, -0.6559, 0.0])
STATE_NAMES = (
    *(f"joint{i}_pos" for i in range(1, 7)),
    *(f"joint{i}_vel" for i in range(1, 7)),
    "gripper_opening",
    "ee_x", "ee_y", "ee_z", "ee_qw", "ee_qx", "ee_qy", "ee_qz",
)
STATE_DIM = len(STATE_NAMES)
CAMERAS = ("front", "wrist", "side")
# End-effector workspace relative to the table top: (low corner, high corner).
WORKSPACE = np.array([[0.2, -0.38, 0.008], [0.85, 0.38, 0.45]])
TABLE_CENTRE_XY = np.array([0.5, 0.0])
WORLD_EXTENT = 3.0  # metres: every position in the scene lies within this of the origin
MAX_JOINT_SPEED = 100.0  # rad/s, the bound of the velocity observations


def as_profile(profile: RobotProfile | dict | None) -> RobotProfile:
    if profile is None:
        return default_profile()
    if isinstance(profile, dict):
        return RobotProfile.from_dict(profile)
    return profile


class Cameras:
    """Offscreen renderers of one MuJoCo model, one per image size, each made when first asked for."""

    def __init__(self, model: mujoco.MjModel):
        self.model = model
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}

    def render(self, data: mujoco.MjData, camera: str, size: tuple[int, int], shadows: bool = True) -> np.ndarray:
        """An RGB uint8 image (H, W, 3) from one of the model's cameras.

        Observation images are rendered without shadows: with software OpenGL (llvmpipe,
        as on CPU-only machines) shadows multiply the rendering time (docs/performance.md).
        """
        renderer = self._renderers.get(size)
        if renderer is None:
            renderer = self._renderers[size] = mujoco.Renderer(self.model, height=size[0], width=size[1])
        renderer.update_scene(data, camera=camera)
        renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = shadows
        return renderer.render()

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()


class ArmEnv(gym.Env):
    """Base class of the RoboFleet arm tasks. Subclasses document their own spec."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_FPS}
    environment_state_names: tuple[str, ...]  # set by each task

    def __init__(
        self,
        profile: RobotProfile | dict | None = None,
        cameras: tuple[str, ...] | list[str] = (),
        image_size: int | tuple[int, int] = 96,
        control_mode: str = "ee_delta",
        render_mode: str | None = None,
        terminate_on_success: bool = True,
    ):
        self.profile = as_profile(profile)
        unknown = set(cameras) - set(CAMERAS)
        if unknown:
            raise ValueError(f"unknown camera(s) {sorted(unknown)}; choose from {', '.join(CAMERAS)}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.cameras = tuple(cameras)
        self.image_size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        self.render_mode = render_mode
        self.terminate_on_success = terminate_on_success

        self.model = build_model(self.profile, self.objects_xml())
        self.data = mujoco.MjData(self.model)
        self.frame_skip = round(1.0 / (CONTROL_FPS * self.model.opt.timestep))
        self.table_height = self.profile.table_height
        workspace = WORKSPACE + np.array([0.0, 0.0, self.table_height])
        self.controller = ArmController(self.model, self.data, control_mode, workspace)
        self.goal_site = self.model.site("goal").id
        self.ee_site = self.model.site("ee").id
        self.finger_qpos = self.model.jnt_qposadr[[self.model.joint("finger_left").id, self.model.joint("finger_right").id]]
        self._cameras = Cameras(self.model)

        self.action_space = spaces.Box(-1.0, 1.0, shape=(self.controller.action_dim,), dtype=np.float32)
        observation_spaces = {
            "observation.state": self._state_space(),
            "observation.environment_state": spaces.Box(
                -WORLD_EXTENT, WORLD_EXTENT, shape=(len(self.environment_state_names),), dtype=np.float32
            ),
        }
        for camera in self.cameras:
            observation_spaces[f"observation.images.{camera}"] = spaces.Box(
                0, 255, shape=(*self.image_size, 3), dtype=np.uint8
            )
        self.observation_space = spaces.Dict(observation_spaces)

    def _state_space(self) -> spaces.Box:
        joints = len(ARM_JOINTS)
        joint_range = self.controller.joint_range + [-0.1, 0.1]  # joint limits are soft in MuJoCo
        # Two fingers of 0-0.05 m each; closed hard (pushing) they pass their soft limits too (to -0.012 m seen).
        opening = (-0.02, 0.12)
        low = np.concatenate([joint_range[:, 0], np.full(joints, -MAX_JOINT_SPEED), [opening[0]],
                              np.full(3, -WORLD_EXTENT), np.full(4, -1.0)])
        high = np.concatenate([joint_range[:, 1], np.full(joints, MAX_JOINT_SPEED), [opening[1]],
                               np.full(3, WORLD_EXTENT), np.full(4, 1.0)])
        return spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)

    @property
    def feature_names(self) -> dict[str, tuple[str, ...]]:
        """Names of each dimension of the vector features, for datasets' feature dicts."""
        return {
            "observation.state": STATE_NAMES,
            "observation.environment_state": self.environment_state_names,
            "action": self.controller.action_names,
        }

    # ----- what a task provides -------------------------------------------------
    def objects_xml(self) -> str:
        """MJCF of the task's object bodies (none by default)."""
        return ""

    def _reset_task(self) -> None:
        """Place objects and the goal for a new episode, using ``self.np_random``."""
        raise NotImplementedError

    def _environment_state(self) -> np.ndarray:
        raise NotImplementedError

    def _task_distance(self) -> float:
        """Distance that defines success (below the goal tolerance) and the reward."""
        raise NotImplementedError

    def _reward(self) -> float:
        return -self._task_distance()

    # ----- gymnasium API ----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        arm_qpos = self.controller.qpos_idx
        self.data.qpos[arm_qpos] = HOME_QPOS + self.np_random.uniform(-0.08, 0.08, size=len(ARM_JOINTS))
        self.data.qpos[self.finger_qpos] = 0.05
        self._reset_task()
        mujoco.mj_forward(self.model, self.data)
        self.controller.hold()
        return self._observation(), {"is_success": self._is_success()}

    def step(self, action):
        self.controller.apply(action)
        mujoco.mj_step(self.model, self.data, nstep=self.frame_skip)
        success = self._is_success()
        terminated = success and self.terminate_on_success
        return self._observation(), self._reward(), terminated, False, {"is_success": success}

    def render(self):
        if self.render_mode == "rgb_array":
            return self.render_camera("front", (480, 480))
        return None

    def close(self):
        self._cameras.close()

    # ----- helpers ----------------------------------------------------------------------
    @property
    def ee_position(self) -> np.ndarray:
        return self.data.site_xpos[self.ee_site]

    @property
    def goal_position(self) -> np.ndarray:
        return self.model.site_pos[self.goal_site]

    def _is_success(self) -> bool:
        return bool(self._task_distance() < self.profile.goal_tolerance)

    def _noise(self, size: int) -> np.ndarray:
        return self.np_random.normal(0.0, self.profile.sensor_noise, size=size)

    def _observation(self) -> dict[str, np.ndarray]:
        qpos_idx, dof_idx = self.controller.qpos_idx, self.controller.dof_idx
        ee_quat = np.empty(4)
        mujoco.mju_mat2Quat(ee_quat, self.data.site_xmat[self.ee_site])
        state = np.concatenate(
            [
                self.data.qpos[qpos_idx],
                self.data.qvel[dof_idx],
                [self.data.qpos[self.finger_qpos].sum()],
                self.ee_position + self._noise(3),
                ee_quat,
            ]
        )
        observation = {
            "observation.state": state.astype(np.float32),
            "observation.environment_state": self._environment_state().astype(np.float32),
        }
        for camera in self.cameras:
            observation[f"observation.images.{camera}"] = self.render_camera(camera, self.image_size, shadows=False)
        return observation

    def render_camera(self, camera: str, size: tuple[int, int], shadows: bool = True) -> np.ndarray:
        """An RGB uint8 image (H, W, 3) from one of the scene's cameras (``Cameras.render``)."""
        return self._cameras.render(self.data, camera, size, shadows)

    def sample_table_point(self, margin: float, half_extent=(0.13, 0.2)) -> np.ndarray:
        """A uniform xy point on the usable part of the table."""
        half_extent = np.asarray(half_extent) - margin
        return TABLE_CENTRE_XY + self.np_random.uniform(-half_extent, half_extent)
