"""Scripted experts: they solve every task at every site, and their demonstrations vary."""

from collections import defaultdict

import numpy as np
import pytest

import sim
from sim.fleet import SITES, episode_seed
from sim.rollout import run_episode

ROBOTS = sim.make_fleet(9, seed=0)  # three robots from each site
EPISODES = 3


@pytest.mark.parametrize("task", ["reach", "push", "pick_place", "stack"])
def test_expert_succeeds_at_every_site(task):
    spec = sim.resolve_task(task)
    success = defaultdict(list)
    for profile in ROBOTS:
        env, expert = spec.make_env(profile), spec.make_expert(profile)
        for index in range(EPISODES):
            seed = episode_seed(0, profile.robot_id, index)
            success[profile.site].append(run_episode(env, expert, seed, reset_policy=expert.reset).success)
        env.close()
    assert set(success) == set(SITES)
    for site, flags in success.items():
        assert np.mean(flags) >= 0.95, f"{task} expert at {site}: {sum(flags)}/{len(flags)}"


@pytest.mark.parametrize("task", ["reach", "pick_place"])
def test_expert_style_varies_with_its_seed(task):
    """Same scene, different expert seeds: different paths, both successful."""
    spec = sim.resolve_task(task)
    profile = ROBOTS[2]
    env = spec.make_env(profile)
    actions = []
    for expert_seed in (1, 2):
        expert = spec.make_expert(profile)
        episode = run_episode(env, expert, seed=5, reset_policy=lambda _, s=expert_seed: expert.reset(s), record=True)
        assert episode.success
        actions.append(episode.frames["action"])
    length = min(len(a) for a in actions)
    assert np.abs(actions[0][:length] - actions[1][:length]).mean() > 0.05


@pytest.mark.parametrize("task", ["reach", "push", "pick_place", "stack"])
def test_the_state_read_labeller_drives_every_task_from_the_start_and_from_a_random_detour(task):
    """``label_state`` is a controller of its own: driving with it alone succeeds, also after 15 random steps
    have put the robot somewhere no demonstration goes (what DAgger asks it to label)."""
    spec = sim.resolve_task(task)
    for profile in ROBOTS[:3]:
        env, expert = spec.make_env(profile), spec.make_expert(profile)
        for index in range(2):
            seed = episode_seed(0, profile.robot_id, index)
            assert run_episode(env, expert.label_state, seed, reset_policy=expert.reset).success
            detour = np.random.default_rng(seed).uniform(-1, 1, size=(15, *env.action_space.shape))
            steps = iter(detour)

            def policy(observation, steps=steps, expert=expert):
                action = next(steps, None)
                return expert.label_state(observation) if action is None else action

            assert run_episode(env, policy, seed, reset_policy=expert.reset).success, (profile.site, index)
        env.close()


def test_the_label_of_a_state_does_not_depend_on_how_the_expert_got_there():
    """Two experts of the same style, one fresh and one that drove the whole episode, label each of
    its states alike."""
    spec = sim.resolve_task("pick_place")
    profile = ROBOTS[1]
    env = spec.make_env(profile)
    driver, fresh = spec.make_expert(profile), spec.make_expert(profile)
    episode = run_episode(env, driver, seed=3, reset_policy=lambda _: driver.reset(7), record=True)
    assert episode.success
    observations = [{key: episode.frames[key][t] for key in episode.frames if key.startswith("observation")}
                    for t in range(episode.length)]
    fresh.reset(7)
    fresh_labels = np.stack([fresh.label_state(o) for o in observations])
    driven_labels = np.stack([driver.label_state(o) for o in observations])  # after driving through all of them
    np.testing.assert_array_equal(fresh_labels, driven_labels)
    env.close()


def test_a_policy_descending_onto_the_cube_unsquared_is_labelled_to_carry_on_down():
    """Over the cube and below the hover point, ``label_state`` says descend (squaring on the way) even when the
    gripper is 0.5 rad off square: policies grasp from there, and "go back up" labels taught them never to."""
    spec = sim.resolve_task("pick_place")
    profile = ROBOTS[0]
    env, expert = spec.make_env(profile), spec.make_expert(profile)
    episode = run_episode(env, expert, seed=5, reset_policy=expert.reset, record=True)
    env.close()
    observations = [{key: episode.frames[key][t].copy() for key in episode.frames if key.startswith("observation")}
                    for t in range(episode.length)]
    descending = [o for o in observations if expert.label_state(o)[2] < -0.5 and expert.phase == "descend"]
    observation = descending[len(descending) // 2]  # squared, halfway down to the grasp
    twist = np.array([np.cos(0.25), 0.0, 0.0, np.sin(0.25)])  # 0.5 rad about the vertical, applied to the gripper
    w, x, y, z = observation["observation.state"][16:20]
    a, _, _, d = twist
    observation["observation.state"][16:20] = [a * w - d * z, a * x - d * y, a * y + d * x, a * z + d * w]
    assert expert.label_state(observation)[2] < 0


def test_a_demonstration_records_the_actions_the_expert_took():
    """collect records ``label(observation)`` in place of the action for an agent that has ``label`` (DAgger's
    student, train/dagger.py); an expert's demonstration is what it did, so collect's call records just that."""
    spec = sim.resolve_task("pick_place")
    profile = ROBOTS[0]
    env = spec.make_env(profile)
    recorded = []
    for label in (None, "as collect calls it"):
        expert = spec.make_expert(profile)
        relabel = getattr(expert, "label", None) if label else None
        recorded.append(run_episode(env, expert, seed=4, reset_policy=expert.reset, record=True,
                                    label=relabel).frames["action"])
    np.testing.assert_array_equal(*recorded)
    env.close()
