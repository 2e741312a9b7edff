"""The fleet: deterministic, JSON-round-trippable, non-IID across sites."""

import json

import numpy as np
import pytest

from sim.fleet import SITE_DISTRIBUTIONS, SITES, RobotProfile, episode_seed, fleet_task, make_fleet, make_robot


def test_fleet_is_deterministic_and_robot_k_does_not_depend_on_fleet_size():
    assert make_fleet(12, seed=3) == make_fleet(12, seed=3)
    assert make_fleet(40, seed=3)[:12] == make_fleet(12, seed=3)
    assert make_fleet(5, seed=3) != make_fleet(5, seed=4)


def test_profile_round_trips_through_json():
    for profile in make_fleet(6, seed=1):
        restored = RobotProfile.from_dict(json.loads(profile.to_json()))
        assert restored == profile


def test_profile_rejects_unknown_fields():
    data = make_robot(0).to_dict() | {"wheels": 4}
    with pytest.raises(ValueError, match="wheels"):
        RobotProfile.from_dict(data)


def test_every_site_is_present_and_draws_from_its_own_distribution():
    fleet = make_fleet(60, seed=0)
    assert {p.site for p in fleet} == set(SITES)
    for profile in fleet:
        for name, (low, high) in SITE_DISTRIBUTIONS[profile.site].items():
            assert low <= getattr(profile, name) <= high, (profile.site, name)
    mean_mass = {site: np.mean([p.object_mass for p in fleet if p.site == site]) for site in SITES}
    mean_friction = {site: np.mean([p.table_friction for p in fleet if p.site == site]) for site in SITES}
    # The non-IID fleet of the source material: warehouse boxes are heavy and slide easily.
    assert mean_mass["warehouse"] > 3 * max(mean_mass["office"], mean_mass["factory"])
    assert mean_friction["warehouse"] < 0.6 * min(mean_friction["office"], mean_friction["factory"])


def test_bad_fleet_arguments_are_rejected():
    with pytest.raises(ValueError, match="at least 1 robot"):
        make_fleet(0)
    with pytest.raises(ValueError, match="unknown site"):
        make_robot(0, site="moon")


def test_episode_seeds_are_pure_and_streams_are_disjoint():
    assert episode_seed(0, 5, 2) == episode_seed(0, 5, 2)
    collect = {episode_seed(0, robot, episode) for robot in range(20) for episode in range(20)}
    evaluate = {episode_seed(0, robot, episode, "evaluate") for robot in range(20) for episode in range(20)}
    assert len(collect) == 400 and len(evaluate) == 400
    assert not collect & evaluate


@pytest.mark.parametrize("tasks", [3, 6, 10, 11, 50])
def test_a_fleet_shares_its_tasks_out_evenly_and_each_task_meets_every_site(tasks):
    fleet = make_fleet(6 * tasks, seed=0)
    robots_of = {task: [profile for profile in fleet if fleet_task(range(tasks), profile.robot_id) == task]
                 for task in range(tasks)}
    for block in range(6):  # every block of n robots runs each task once
        assert sorted(fleet_task(range(tasks), robot) for robot in range(block * tasks, (block + 1) * tasks)) == \
            list(range(tasks))
    assert all({profile.site for profile in robots} == set(SITES) for robots in robots_of.values())
