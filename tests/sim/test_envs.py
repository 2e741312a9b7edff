"""The gymnasium envs: API conformance, determinism, and physics that follow the profile."""

import dataclasses
import warnings

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import sim
from sim.envs.base import CAMERAS, CONTROL_FPS
from sim.rollout import run_episode
from sim.tasks import BUILTIN_TASKS

ENV_IDS = [spec.env_id for spec in BUILTIN_TASKS.values()]


@pytest.mark.parametrize("cameras", [(), CAMERAS], ids=["state", "cameras"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_env_checker_passes(env_id, cameras):
    env = gym.make(env_id, cameras=cameras, image_size=64, render_mode="rgb_array")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert not [str(w.message) for w in caught if "gymnasium" in w.filename]
    observation, info = env.reset(seed=0)
    assert "is_success" in info
    for camera in cameras:
        image = observation[f"observation.images.{camera}"]
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8
        assert image.std() > 5  # a real rendered scene, not a blank frame
    assert env.render().shape == (480, 480, 3)
    assert env.metadata["render_fps"] == CONTROL_FPS
    env.close()


@pytest.mark.parametrize("task", ["reach", "push", "pick_place", "stack"])
def test_same_seed_gives_the_same_trajectory(task):
    spec = sim.resolve_task(task)
    profile = sim.make_robot(4)
    trajectories = []
    for _ in range(2):
        env, expert = spec.make_env(profile), spec.make_expert(profile)
        trajectories.append(run_episode(env, expert, seed=11, reset_policy=expert.reset, record=True).frames)
        env.close()
    first, second = trajectories
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)
    env, expert = spec.make_env(profile), spec.make_expert(profile)
    other = run_episode(env, expert, seed=12, reset_policy=expert.reset, record=True).frames
    assert not np.array_equal(other["observation.environment_state"][0], first["observation.environment_state"][0])


def test_success_flag_comes_every_step_and_episodes_truncate_at_the_time_limit():
    env = gym.make("robofleet/Reach-v0")
    env.reset(seed=0)
    steps = 0
    while True:
        _, _, terminated, truncated, info = env.step(np.zeros(5, dtype=np.float32))
        steps += 1
        assert isinstance(info["is_success"], bool)
        if terminated or truncated:
            break
    assert truncated and steps == sim.ENVS["robofleet/Reach-v0"][1] == 60


def _profile(**changes):
    return dataclasses.replace(sim.make_robot(0), **changes)


def test_profile_parameters_reach_the_compiled_model():
    profile = _profile(object_mass=0.42, object_half_size=0.03, table_friction=0.3, actuator_gain_scale=1.2)
    env = gym.make("robofleet/Push-v0", profile=profile).unwrapped
    model = env.model
    assert model.body("object").mass[0] == pytest.approx(0.42)
    np.testing.assert_allclose(model.geom("object").size, [0.03] * 3)
    assert model.geom("table_top").friction[0] == pytest.approx(0.3)
    assert model.actuator("joint1").gainprm[0] == pytest.approx(400 * 1.2)


def _slide_distance(table_friction: float) -> float:
    """How far the cube slides on the table after a 0.5 m/s shove, arm held still."""
    env = gym.make("robofleet/Push-v0", profile=_profile(table_friction=table_friction)).unwrapped
    env.reset(seed=3)
    start = env.object_position.copy()
    env.data.qvel[env.model.jnt_dofadr[env.model.joint("object").id]] = 0.5
    hold = np.array([0, 0, 0, 0, -1], dtype=np.float32)
    for _ in range(10):
        env.step(hold)
    return float(np.linalg.norm(env.object_position[:2] - start[:2]))


def test_table_friction_changes_how_far_a_cube_slides():
    slippery, grippy = _slide_distance(0.25), _slide_distance(1.1)
    assert slippery > 2.5 * grippy


def _step_response(gain_scale: float) -> float:
    """End-effector displacement in the first control step of a full-speed move."""
    env = gym.make("robofleet/Reach-v0", profile=_profile(actuator_gain_scale=gain_scale)).unwrapped
    env.reset(seed=0)
    start = env.ee_position.copy()
    env.step(np.array([1, 0, 0, 0, -1], dtype=np.float32))
    return float(np.linalg.norm(env.ee_position - start))


def test_actuator_gains_change_tracking():
    assert _step_response(1.25) > 1.05 * _step_response(0.8)


@pytest.mark.parametrize("robot_id", [0, 1, 2])
def test_a_cube_left_alone_stays_at_rest(robot_id):
    """Contact stability at our 5 ms timestep: no creep, no sinking, at every site."""
    env = gym.make("robofleet/Push-v0", profile=sim.make_robot(robot_id)).unwrapped
    env.reset(seed=0)
    start = env.object_position.copy()
    for _ in range(40):  # 2 s
        env.step(np.array([0, 0, 0, 0, -1], dtype=np.float32))
    np.testing.assert_allclose(env.object_position, start, atol=2e-4)


def test_table_height_moves_the_cube():
    low = gym.make("robofleet/Push-v0", profile=_profile(table_height=-0.04)).unwrapped
    high = gym.make("robofleet/Push-v0", profile=_profile(table_height=0.04)).unwrapped
    low.reset(seed=0), high.reset(seed=0)
    assert high.object_position[2] - low.object_position[2] == pytest.approx(0.08, abs=1e-3)


def test_sensor_noise_follows_the_profile():
    def observed_minus_true(noise):
        env = gym.make("robofleet/Reach-v0", profile=_profile(sensor_noise=noise)).unwrapped
        errors = []
        for seed in range(20):
            observation, _ = env.reset(seed=seed)
            errors.append(observation["observation.state"][13:16] - env.ee_position)
        return float(np.std(errors))

    assert observed_minus_true(0.0) < 1e-6
    assert observed_minus_true(0.004) == pytest.approx(0.004, rel=0.3)


def test_joint_position_control_mode_reaches_its_target():
    env = gym.make("robofleet/Reach-v0", control_mode="joint_pos").unwrapped
    assert env.action_space.shape == (7,)
    env.reset(seed=0)
    action = np.array([0.1, 0.2, 0.3, 0.0, 0.1, -0.2, -1.0], dtype=np.float32)
    for _ in range(20):
        env.step(action)
    low, high = env.controller.joint_range.T
    expected = low + (action[:6] + 1) / 2 * (high - low)
    np.testing.assert_allclose(env.data.qpos[env.controller.qpos_idx], expected, atol=0.02)


def test_bad_env_arguments_are_rejected():
    with pytest.raises(ValueError, match="unknown camera"):
        gym.make("robofleet/Reach-v0", cameras=("top",))
    with pytest.raises(ValueError, match="control mode"):
        gym.make("robofleet/Reach-v0", control_mode="torque")


def test_arm_links_never_collide_with_each_other():
    env = gym.make("robofleet/PickPlace-v0").unwrapped
    env.reset(seed=0)
    robot_bodies = {env.model.body(name).id for name in ("link1", "link2", "link3", "link4", "link5", "hand")}
    for _ in range(30):
        env.step(env.action_space.sample())
        for contact in env.data.contact[: env.data.ncon]:
            bodies = {env.model.geom_bodyid[contact.geom1], env.model.geom_bodyid[contact.geom2]}
            assert not bodies <= robot_bodies | {env.model.body("finger_left").id, env.model.body("finger_right").id}
    assert isinstance(env.model, mujoco.MjModel)
