"""Every MT50 task: it resets, its scripted expert solves it from the fixed positions and from the fleet's
random ones, and it takes over after random actions. No rendering: about a minute on 2 cores."""

import numpy as np
import pytest

import sim
from sim.fleet import episode_seed
from sim.rollout import run_episode
from sim.tasks import resolve_tasks

ROBOTS = sim.make_fleet(3)  # one per site; task k runs on robot k % 3
DETOUR = 10  # random actions before the expert takes over


def _take_over(expert, seed: int):
    """A policy that acts at random for ``DETOUR`` steps, then hands over to ``expert``."""
    detour = iter(np.random.default_rng(seed).uniform(-1, 1, size=(DETOUR, 4)).astype(np.float32))

    def policy(observation):
        action = next(detour, None)
        return expert(observation) if action is None else action

    return policy


def _episodes(spec, index: int) -> dict[str, list[bool]]:
    """Success of the task's episodes: one from the fixed positions, two from random ones, two take-overs."""
    profile = ROBOTS[index % len(ROBOTS)]
    seeds = [episode_seed(0, profile.robot_id, episode) for episode in range(4)]
    expert = spec.make_expert(profile)
    fixed, randomised = spec.make_env(profile, positions="fixed"), spec.make_env(profile)
    observation, info = randomised.reset(seed=seeds[0])
    assert randomised.observation_space.contains(observation) and info == {"is_success": False}
    results = {
        "fixed": [run_episode(fixed, expert, seeds[0]).success],
        "expert": [run_episode(randomised, expert, seed).success for seed in seeds[:2]],
        "take-over": [run_episode(randomised, _take_over(expert, seed), seed).success for seed in seeds[2:]],
    }
    fixed.close()
    randomised.close()
    return results


@pytest.mark.slow
def test_every_mt50_task_resets_and_its_expert_succeeds_and_takes_over():
    results = {spec.name: _episodes(spec, index) for index, spec in enumerate(resolve_tasks("metaworld/mt50"))}
    table = "\n".join(f"{task}: {outcome}" for task, outcome in results.items() if not all(map(all, outcome.values())))
    for kind, floor in (("fixed", 1.0), ("expert", 0.93), ("take-over", 0.9)):
        flags = [flag for outcome in results.values() for flag in outcome[kind]]
        assert np.mean(flags) >= floor, f"{kind}: {sum(flags)}/{len(flags)}\n{table}"
    # Meta-World's scripted policies are not perfect from every position: each task at least once each way.
    assert all(any(outcome["expert"]) and any(outcome["take-over"]) for outcome in results.values()), table
