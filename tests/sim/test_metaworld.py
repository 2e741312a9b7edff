"""Meta-World as a task family: names and groups through the task registry, one-line errors, the env's
observation layout, fixed and per-robot positions, determinism, and the corner2 camera per site."""

import pickle
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import sim
from collect_helpers import REPO, subprocess_env
from fault_helpers import assert_one_line
from sim.envs.metaworld import ENVIRONMENT_STATE_NAMES, MetaWorldEnv
from sim.metaworld_tasks import DESCRIPTIONS, GROUPS, MT10
from sim.rollout import replay_difference
from sim.tasks import BUILTIN_TASKS, available_tasks, recorded_task, resolve_task, resolve_tasks

PICK_PLACE = "metaworld/pick-place-v3"


def test_every_mt50_task_and_group_resolves_through_the_task_registry():
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS, MT10_V3

    sizes = {name: len(tasks) for name, tasks in GROUPS.items()}
    assert sizes == {"metaworld/mt10": 10, "metaworld/mt50": 50, "metaworld/easy": 28, "metaworld/medium": 11,
                     "metaworld/hard": 6, "metaworld/very_hard": 5}
    difficulties = [task for group in ("easy", "medium", "hard", "very_hard") for task in GROUPS[f"metaworld/{group}"]]
    assert sorted(difficulties) == sorted(GROUPS["metaworld/mt50"]) == sorted(ALL_V3_ENVIRONMENTS)
    assert MT10 == tuple(MT10_V3)
    mt50 = resolve_tasks("metaworld/mt50")
    assert [spec.name for spec in mt50] == [f"metaworld/{task}" for task in GROUPS["metaworld/mt50"]]
    for spec in mt50:
        assert spec.env_id == spec.name and resolve_task(spec.name) is spec and resolve_tasks(spec.name) == [spec]
        assert recorded_task(spec.name, None, "manifest.json") is spec  # a file may name it: no code is imported
        assert gym.spec(spec.env_id).max_episode_steps == 500
    assert set(available_tasks()) >= {spec.name for spec in mt50} | set(BUILTIN_TASKS)
    assert resolve_tasks("pick_place") == [BUILTIN_TASKS["pick_place"]]


@pytest.mark.parametrize("name, call, message", [
    ("metaworld/pick-place", resolve_task, "did you mean metaworld/pick-place-v3?"),
    ("metaworld/Easy", resolve_tasks, "did you mean metaworld/easy?"),
    ("metaworld/mt10", resolve_task, "'metaworld/mt10' is a group of 10 tasks and this takes one task"),
    ("metaworld/teleport-v3", resolve_tasks, "unknown Meta-World task 'metaworld/teleport-v3'"),
])
def test_bad_task_names_and_groups_are_one_line_value_errors(name, call, message):
    with pytest.raises(ValueError, match=message) as error:
        call(name)
    assert "\n" not in str(error.value)


def test_a_command_turns_a_bad_meta_world_name_into_one_line_and_a_failing_exit():
    completed = subprocess.run([sys.executable, "-m", "sim.demo", "--tasks", "metaworld/pick-place", "--quiet"],
                               capture_output=True, text=True, cwd=REPO, env=subprocess_env(), timeout=120)
    assert completed.returncode != 0
    assert_one_line(completed.stderr, "unknown Meta-World task 'metaworld/pick-place'")


def test_importing_sim_and_its_task_names_loads_neither_mujoco_nor_metaworld():
    probe = ("import sys, gymnasium, sim, sim.metaworld_tasks; assert 'metaworld/push-v3' in gymnasium.registry; "
             "print(*(m for m in ('mujoco', 'metaworld') if m in sys.modules))")
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO,
                               env=subprocess_env(), timeout=120, check=True)
    assert completed.stdout.strip() == ""


def test_observations_follow_lerobots_layout_and_the_gymnasium_checker_passes():
    env = gym.make(PICK_PLACE, profile=sim.make_robot(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert not [str(w.message) for w in caught if "gymnasium" in w.filename]
    observation, _ = env.reset(seed=3)
    assert set(observation) == {"observation.state", "observation.environment_state"}
    state, full = observation["observation.state"], observation["observation.environment_state"]
    assert state.shape == (4,) and full.shape == (39,) == (len(ENVIRONMENT_STATE_NAMES),)
    np.testing.assert_array_equal(state, full[:4])
    np.testing.assert_array_equal(full[-3:], env.unwrapped._sawyer._target_pos.astype(np.float32))  # goal observed
    unwrapped = env.unwrapped
    assert (unwrapped.task, unwrapped.task_index) == ("pick-place-v3", 31)  # LeRobot's index
    assert unwrapped.task_description == DESCRIPTIONS["pick-place-v3"] and env.metadata["render_fps"] == 80
    _, reward, terminated, truncated, info = env.step(np.zeros(4, dtype=np.float32))
    assert isinstance(info["is_success"], bool) and not (terminated or truncated) and reward >= 0
    env.close()


def _initial_state(task: str, robot: int, seed: int, positions: str = "random") -> np.ndarray:
    env = resolve_task(task).make_env(sim.make_robot(robot), positions=positions)
    observation, _ = env.reset(seed=seed)
    env.close()
    return observation["observation.environment_state"]


def test_random_positions_are_each_robots_own_per_seed_and_fixed_ones_are_the_mt50_variation():
    import metaworld

    first = _initial_state(PICK_PLACE, robot=0, seed=1)
    np.testing.assert_array_equal(first, _initial_state(PICK_PLACE, robot=0, seed=1))
    assert not np.array_equal(first, _initial_state(PICK_PLACE, robot=0, seed=2))
    assert not np.array_equal(first, _initial_state(PICK_PLACE, robot=3, seed=1))
    fixed = {_initial_state(PICK_PLACE, robot, seed, "fixed").tobytes() for robot, seed in ((0, 1), (0, 2), (4, 9))}
    assert len(fixed) == 1
    env = MetaWorldEnv("pick-place-v3", positions="fixed")
    benchmark = pickle.loads(metaworld.MT1("pick-place-v3", seed=42).train_tasks[0].data)
    np.testing.assert_array_equal(env._sawyer._last_rand_vec, benchmark["rand_vec"])
    env.close()


@pytest.mark.parametrize("positions", ["random", "fixed"])
def test_the_same_seed_replays_the_same_episode(positions):
    """collect's determinism check (sim.rollout.replay_difference) passes."""
    spec = resolve_task("metaworld/assembly-v3")
    profile = sim.make_robot(2)
    env = spec.make_env(profile, positions=positions)
    assert replay_difference(env, spec.make_expert(profile), seed=7, steps=20) is None
    env.close()


def test_bad_env_arguments_are_one_line_value_errors():
    for kwargs, message in (({"task": "teleport-v3"}, "unknown Meta-World task"),
                            ({"task": "push-v3", "cameras": ("front",)}, "unknown camera"),
                            ({"task": "push-v3", "positions": "sometimes"}, "positions must be one of")):
        with pytest.raises(ValueError, match=message) as error:
            MetaWorldEnv(**kwargs)
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("task", [PICK_PLACE, "metaworld/door-open-v3"])
def test_corner2_renders_at_the_policys_size_and_each_site_sees_its_own_scene(task):
    spec = resolve_task(task)
    images = []
    for robot in sim.make_fleet(3):  # office, warehouse, factory
        env = spec.make_env(robot, cameras=("corner2",), image_size=64, positions="fixed")
        observation, _ = env.reset(seed=0)
        image = observation["observation.images.corner2"]
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8 and image.std() > 5
        assert env.observation_space.contains(observation)
        np.testing.assert_array_equal(env.reset(seed=0)[0]["observation.images.corner2"], image)
        images.append(image.astype(np.int16))
        env.close()
    for a in range(3):
        for b in range(a + 1, 3):
            assert np.abs(images[a] - images[b]).mean() > 5, (a, b)
