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
