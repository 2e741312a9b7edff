"""Perception is possible: at reset, every task's goal and cubes show in a camera image.

Visibility is measured with MuJoCo's segmentation rendering from the env's own
cameras at its default image size, so a thing counts only where its pixels are
actually drawn: inside the frustum and not hidden behind the arm or another object.
"""

from collections import Counter

import mujoco
import numpy as np
import pytest

import sim
from sim.envs.base import CAMERAS
from sim.fleet import SITES, episode_seed

MIN_PIXELS = 4  # of a 96 x 96 image
ROBOTS_PER_SITE = 4
RESETS_PER_ROBOT = 2
FLEET_SEED = 0
CUBES = {"reach": (), "push": ("object",), "pick_place": ("object",), "stack": ("object", "base_cube")}


def count_pixels(segmentation: np.ndarray, objtype: mujoco.mjtObj, objid: int) -> int:
    """Pixels of one MuJoCo object in a segmentation image of (objid, objtype) pairs."""
    return int(np.count_nonzero((segmentation[..., 0] == objid) & (segmentation[..., 1] == objtype)))


def visible_pixels(env, renderer: mujoco.Renderer, camera: str, cubes: tuple[str, ...]) -> dict[str, int]:
    """Pixels of the goal marker and of each cube geom in one camera's view."""
    renderer.update_scene(env.data, camera=camera)
    pixels = {"goal": count_pixels(renderer.render(), mujoco.mjtObj.mjOBJ_SITE, env.goal_site)}
    # The goal marker is translucent: a cube behind it shows in the RGB image but
    # not in the segmentation, so the cubes are counted with the marker hidden.
    without_goal = mujoco.MjvOption()
    without_goal.sitegroup[env.model.site_group[env.goal_site]] = 0
    renderer.update_scene(env.data, camera=camera, scene_option=without_goal)
    segmentation = renderer.render()
    for cube in cubes:
        pixels[cube] = count_pixels(segmentation, mujoco.mjtObj.mjOBJ_GEOM, env.model.geom(cube).id)
    return pixels


def views_at_reset(task: str):
    """Yield (profile, seed, {camera: visible_pixels}) for the first resets of a fleet's robots."""
    spec = sim.resolve_task(task)
    for profile in sim.make_fleet(ROBOTS_PER_SITE * len(SITES), FLEET_SEED):
        env = spec.make_env(profile).unwrapped
        renderer = mujoco.Renderer(env.model, *env.image_size)
        renderer.enable_segmentation_rendering()
        for episode in range(RESETS_PER_ROBOT):
            seed = episode_seed(FLEET_SEED, profile.robot_id, episode)
            env.reset(seed=seed)
            views = {camera: visible_pixels(env, renderer, camera, CUBES[task]) for camera in CAMERAS}
            yield profile, seed, views
        renderer.close()
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("task", list(CUBES))
def test_goal_and_cubes_are_in_view_of_a_camera_at_reset(task):
    resets_per_site = Counter()
    hidden = []
    for profile, seed, views in views_at_reset(task):
        resets_per_site[profile.site] += 1
        for thing in ("goal", *CUBES[task]):
            if max(pixels[thing] for pixels in views.values()) < MIN_PIXELS:
                hidden.append(f"{thing} of robot {profile.robot_id} ({profile.site}), seed {seed}: {views}")
    assert resets_per_site == {site: ROBOTS_PER_SITE * RESETS_PER_ROBOT for site in SITES}
    assert not hidden, "hidden from every camera:\n" + "\n".join(hidden)


@pytest.mark.parametrize("task", list(CUBES))
def test_the_goal_marker_is_drawn_in_the_observation_images(task):
    """Hiding the marker changes the env's own observation images, not just a segmentation."""
    env = sim.resolve_task(task).make_env(sim.make_robot(0, FLEET_SEED), cameras=CAMERAS).unwrapped
    observation, _ = env.reset(seed=0)
    env.model.site_rgba[env.goal_site, 3] = 0.0
    changed = {}
    for camera in CAMERAS:
        with_goal = observation[f"observation.images.{camera}"].astype(int)
        without_goal = env.render_camera(camera, env.image_size, shadows=False)
        changed[camera] = int(np.count_nonzero(np.abs(with_goal - without_goal).max(axis=-1) > 10))
    env.close()
    assert max(changed.values()) >= MIN_PIXELS, changed
