"""One Meta-World task for one robot of the fleet, in LeRobot's observation layout."""

from __future__ import annotations

import pickle

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces
from metaworld.env_dict import ALL_V3_ENVIRONMENTS
from metaworld.types import Task

from sim.envs.base import WORLD_EXTENT, Cameras, as_profile
from sim.fleet import RobotProfile
from sim.metaworld_tasks import DESCRIPTIONS, TASK_INDEX

CAMERA = "corner2"
IMAGE = f"observation.images.{CAMERA}"
# LeRobot's corner2 position (after Seo et al. 2022, arXiv:2206.14244): nearer the table than Meta-World's own.
CORNER2_POSITION = np.array([0.75, 0.075, 0.7])
# Per-site colour of the scene's three lights, scaled by the robot's light_intensity.
SITE_LIGHT = {"office": (1.0, 0.95, 0.85), "warehouse": (0.85, 0.75, 0.55), "factory": (0.75, 0.85, 1.0)}
LIGHT_SCALE = 0.45  # light_intensity 0.55-0.9 gives diffuse 0.25-0.4 (Meta-World's own is 0.3)
POSITIONS = ("random", "fixed")
FIXED_SEED = 42  # Meta-World's MT1(task, seed=42), whose first variation LeRobot's env starts from
PIN_MARGIN = 0.01  # metres
CONTROL_FPS = 80  # Meta-World's frame_skip 5 x 2.5 ms

STATE_NAMES = ("ee_x", "ee_y", "ee_z", "gripper_opening")
_FRAME = (*STATE_NAMES, *(f"obj{k}_{axis}" for k in (1, 2) for axis in ("x", "y", "z", "q0", "q1", "q2", "q3")))
ENVIRONMENT_STATE_NAMES = (*_FRAME, *(f"prev_{name}" for name in _FRAME), "goal_x", "goal_y", "goal_z")
ACTION_NAMES = ("dx", "dy", "dz", "gripper")


class MetaWorldEnv(gym.Env):
    """A Meta-World (v3) task for one robot profile.

    **Action** (4, in [-1, 1]): Meta-World's own, the end-effector displacement (x, y, z; 1 is
    1 cm a step) and the gripper effort (1 closes).

    **Observation**:

    | key                             | shape    | what                                                   |
    |---------------------------------|----------|--------------------------------------------------------|
    | `observation.state`             | (4,)     | end-effector x, y, z (m) and gripper opening (0-1)     |
    | `observation.environment_state` | (39,)    | Meta-World's full observation: this frame (end effector, gripper, two objects' positions and quaternions, zero-padded), the previous frame, the goal |
    | `observation.images.corner2`    | (H, W, 3) uint8 | the corner2 camera, only with `cameras=("corner2",)` |

    The camera is named as every RoboFleet camera is (``observation.images.<camera>``), so training and
    evaluation read it as any other; LeRobot's Meta-World datasets call it ``observation.image``.

    ``observation.environment_state`` is privileged (the scripted policies read it); the task is
    in ``task`` (Meta-World's name), ``task_description`` and ``task_index`` (LeRobot's), which
    is where LeRobot's evaluation reads it.

    **Positions**: ``positions="random"`` draws the objects and goal with Meta-World's own
    sampler from a generator seeded by (reset seed, robot id): each robot has its own positions
    for each seed. ``positions="fixed"`` uses one variation per task for every robot and seed,
    the MT50 convention: the first of ``metaworld.MT1(task, seed=42)``'s, as LeRobot's env.

    **The fleet's variation** is what the cameras see: the corner2 camera sits at LeRobot's
    position moved by the robot's ``camera_offset``, and the lights take the site's colour at
    the robot's ``light_intensity``. The physics is Meta-World's for every robot (the profile's
    object sizes, masses, frictions, gains and sensor noise do not apply), so the scripted
    policies hold everywhere.

    **Reward and success**: Meta-World's reward (0-10) and ``info["success"]``, returned as
    ``info["is_success"]`` with the rest of Meta-World's info. With ``terminate_on_success``
    (the default, as LeRobot's env and ours) the episode ends on the first success; it is
    truncated after Meta-World's 500 steps.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_FPS}

    def __init__(
        self,
        task: str,
        profile: RobotProfile | dict | None = None,
        cameras: tuple[str, ...] | list[str] = (),
        image_size: int | tuple[int, int] = 96,
        positions: str = "random",
        render_mode: str | None = None,
        terminate_on_success: bool = True,
    ):
        if task not in TASK_INDEX:
            raise ValueError(f"unknown Meta-World task {task!r}; choose one of MT50, e.g. pick-place-v3")
        if set(cameras) - {CAMERA}:
            raise ValueError(f"unknown camera(s) {sorted(set(cameras) - {CAMERA})}; Meta-World tasks have {CAMERA}")
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(POSITIONS)}, got {positions!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.task, self.task_description, self.task_index = task, DESCRIPTIONS[task], TASK_INDEX[task]
        self.profile = as_profile(profile)
        self.cameras = tuple(cameras)
        self.image_size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        self.positions = positions
        self.render_mode = render_mode
        self.terminate_on_success = terminate_on_success
        self._sawyer = self._make_sawyer()
        self._cameras = Cameras(self.model)
        self._perturb_scene()
        bounds = self._sawyer.sawyer_observation_space
        # Meta-World leaves the objects' coordinates unbounded; the scene lies within WORLD_EXTENT, as the arm tasks'.
        self._low, self._high = np.maximum(bounds.low, -WORLD_EXTENT), np.minimum(bounds.high, WORLD_EXTENT)
        # Some tasks pin a goal coordinate (low == high), which gymnasium warns of: the space gets 1 cm around it.
        pinned = self._low == self._high
        space_low, space_high = self._low - PIN_MARGIN * pinned, self._high + PIN_MARGIN * pinned
        self.action_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        observation_spaces = {
            "observation.state": spaces.Box(space_low[:4].astype(np.float32), space_high[:4].astype(np.float32)),
            "observation.environment_state": spaces.Box(space_low.astype(np.float32), space_high.astype(np.float32)),
        }
        if self.cameras:
            observation_spaces[IMAGE] = spaces.Box(0, 255, shape=(*self.image_size, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict(observation_spaces)

    def _make_sawyer(self):
        """Meta-World's env of the task with the goal in its observation (as in MT50), positions set up."""
        env_class = ALL_V3_ENVIRONMENTS[self.task]
        sawyer = env_class()
        placeholder = np.zeros_like(sawyer._random_reset_space.low)  # replaced before the first reset
        sawyer.set_task(Task(env_name=self.task, data=pickle.dumps(
            {"env_cls": env_class, "rand_vec": placeholder, "partially_observable": False})))
        # Meta-World's sampler (with its own rejection of overlapping draws) draws from sawyer.np_random.
        sawyer._freeze_rand_vec, sawyer.seeded_rand_vec = False, True
        if self.positions == "fixed":
            # MT1(task, seed=42) seeds numpy's global legacy generator and keeps its first reset's draw.
            sawyer.np_random = np.random.RandomState(FIXED_SEED)
            sawyer.reset()
            sawyer._freeze_rand_vec = True
        return sawyer

    def _perturb_scene(self) -> None:
        model = self._sawyer.model
        model.cam_pos[model.camera(CAMERA).id] = CORNER2_POSITION + np.asarray(self.profile.camera_offset)
        model.light_diffuse[:] = LIGHT_SCALE * self.profile.light_intensity * np.asarray(SITE_LIGHT[self.profile.site])

    @property
    def model(self) -> mujoco.MjModel:
        return self._sawyer.model

    @property
    def data(self) -> mujoco.MjData:
        return self._sawyer.data

    @property
    def feature_names(self) -> dict[str, tuple[str, ...]]:
        """Names of each dimension of the vector features, for datasets' feature dicts."""
        return {"observation.state": STATE_NAMES, "observation.environment_state": ENVIRONMENT_STATE_NAMES,
                "action": ACTION_NAMES}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None and self.positions == "random":
            self._sawyer.np_random = np.random.default_rng([seed, self.profile.robot_id])
        raw, _ = self._sawyer.reset()
        return self._observation(raw), {"is_success": False}

    def step(self, action):
        raw, reward, _, truncated, info = self._sawyer.step(np.asarray(action, dtype=np.float64))
        success = bool(info["success"])
        terminated = success and self.terminate_on_success
        return self._observation(raw), float(reward), terminated, truncated, {**info, "is_success": success}

    def _observation(self, raw: np.ndarray) -> dict[str, np.ndarray]:
        # Meta-World clips its step observations to its bounds; here its reset observation too, and to WORLD_EXTENT.
        full = np.clip(raw, self._low, self._high).astype(np.float32)
        observation = {"observation.state": full[:4], "observation.environment_state": full}
        if self.cameras:
            observation[IMAGE] = self.render_camera(self.image_size, shadows=False)
        return observation

    def render(self):
        if self.render_mode == "rgb_array":
            return self.render_camera((480, 480))
        return None

    def render_camera(self, size: tuple[int, int], shadows: bool = True) -> np.ndarray:
        """An RGB uint8 image (H, W, 3) from corner2, upright: the camera is mounted upside down
        (``Cameras.render``)."""
        return np.ascontiguousarray(self._cameras.render(self.data, CAMERA, size, shadows)[::-1, ::-1])

    def close(self):
        self._cameras.close()
        self._sawyer.close()
