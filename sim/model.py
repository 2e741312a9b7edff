"""Builds the MuJoCo model of one robot from its profile."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import mujoco

from sim.fleet import RobotProfile

SCENE_TEMPLATE = Path(__file__).parent / "assets" / "arm_scene.xml"
ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 7))
FRONT_CAMERA_POS = (1.3, 0.0, 0.8)
SIDE_CAMERA_POS = (0.55, -0.95, 0.4)  # across the table's side: depth along the front camera's axis
BASE_GAINS = {"kp_shoulder": 400.0, "kp_wrist": 120.0}
GRIPPER_GAIN = 400.0


def cube_body_xml(name: str, profile: RobotProfile, rgba=None) -> str:
    """MJCF for a free cube sized, weighted and coloured by the profile."""
    half = profile.object_half_size
    colour = " ".join(f"{c:g}" for c in (rgba or profile.object_rgba))
    return (
        f'    <body name="{name}" pos="0.5 0 {profile.table_height + half:.5f}">\n'
        f'      <freejoint name="{name}"/>\n'
        f'      <geom name="{name}" type="box" size="{half} {half} {half}" mass="{profile.object_mass}"'
        f' friction="{profile.object_friction} 0.01 0.0001" condim="4" rgba="{colour}"/>\n'
        f"    </body>"
    )


@lru_cache(maxsize=1)
def _template() -> str:
    return SCENE_TEMPLATE.read_text()


def scene_xml(profile: RobotProfile, objects_xml: str = "") -> str:
    """The scene's MJCF text for ``profile`` with the task's object bodies inserted."""
    camera = [b + o for b, o in zip(FRONT_CAMERA_POS, profile.camera_offset)]
    side_camera = [b + o for b, o in zip(SIDE_CAMERA_POS, profile.camera_offset)]
    light = profile.light_intensity
    return _template().format(
        table_z=f"{profile.table_height:.5f}",
        camera_target_z=f"{profile.table_height + 0.18:.5f}",
        table_friction=profile.table_friction,
        table_rgba=" ".join(f"{c:g}" for c in profile.table_rgba),
        front_camera_pos=" ".join(f"{c:.4f}" for c in camera),
        side_camera_pos=" ".join(f"{c:.4f}" for c in side_camera),
        side_target_z=f"{profile.table_height + 0.12:.5f}",
        light_diffuse=f"{light:g} {light:g} {light:g}",
        goal_radius=f"{profile.goal_tolerance:g}",
        kp_shoulder=BASE_GAINS["kp_shoulder"] * profile.actuator_gain_scale,
        kp_wrist=BASE_GAINS["kp_wrist"] * profile.actuator_gain_scale,
        kp_gripper=GRIPPER_GAIN,
        objects=objects_xml,
    )


def build_model(profile: RobotProfile, objects_xml: str = "") -> mujoco.MjModel:
    """Compile the scene for ``profile``; raises ValueError if the MJCF is invalid."""
    return mujoco.MjModel.from_xml_string(scene_xml(profile, objects_xml))
