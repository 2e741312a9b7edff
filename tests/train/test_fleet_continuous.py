"""Continuous deployment (train/fleet/deploy.py with ``Help.continuous``, train/fleet/driver.py): a robot starts its
next episode as soon as one ends, its policy history restarts alone, and the budget holds over the whole round."""

import json
from shutil import copytree

import numpy as np
import pytest

from collect.config import CollectConfig
from collect_helpers import assert_same_stores
from dataset import FleetStore
from fleet_helpers import columns, fleet_learn
from sim.fleet import episode_seed
from train.checkpoint import load_policy, open_checkpoint
from train.fleet.deploy import LEDGERS, Help, deploy_round
from train.fleet.driver import FleetDriver
from train.fleet.gates import GateOptions
from train.fleet.labels import labelled_runs

pytestmark = pytest.mark.slow


def observation_stream(policy, robots: int, steps: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{name: rng.normal(size=(robots, *shape)).astype(np.float32) for name, shape in policy.spec.features.items()}
            for _ in range(steps)]


def test_a_restarted_robot_is_driven_as_a_fresh_policy_would_and_the_others_carry_on(trained_run):
    policy, _ = load_policy(str(open_checkpoint(trained_run).path))
    stream = observation_stream(policy, robots=3, steps=24)
    driver, driven = FleetDriver(policy), []
    for step, observations in enumerate(stream):
        if step == 7:  # robot 1 starts a new episode mid-chunk
            driver.restart(1)
        driven.append(driver(observations)[0])
    policy.reset()  # the whole batch as evaluate runs it: robots 0 and 2 never restarted
    together = [policy.select_action(observations) for observations in stream]
    for robot in (0, 2):  # equal but for the last float bits: BLAS may sum a batch of other rows in another order
        np.testing.assert_allclose([a[robot] for a in driven], [a[robot] for a in together], rtol=1e-5, atol=1e-6)
    policy.reset()  # robot 1 alone from its new episode's first frame
    alone = [policy.select_action({name: value[1] for name, value in observations.items()})
             for observations in stream[7:]]
    np.testing.assert_allclose([a[1] for a in driven[7:]], alone, rtol=1e-5, atol=1e-6)
    measuring = FleetDriver(policy, measure=True)
    measuring(stream[0])
    measuring.restart(2)
    _, disagreement = measuring(stream[1])
    assert disagreement[2] == 0 and disagreement[:2].all()  # a fresh episode has no plan to disagree with


def deploy(trained_run, out, continuous, scheduler=None, mode="random", robots=4, episodes=2, operators=2,
           help_steps=60, max_handovers=None, min_segment_steps=None, **gate):
    """A deployment round into ``out`` on the dask cluster at ``scheduler`` (a fresh local one if None)."""
    config = CollectConfig(robots=robots, episodes=episodes, task="pick_place", out=str(out), seed=0,
                           keep_failures=True, workers=2, scheduler=scheduler, quiet=True)
    help = Help(mode, GateOptions(**{"random_rate": 1.0, "stall_steps": 10, **gate}), segment_steps=7,
                operators=operators, continuous=continuous, min_segment_steps=min_segment_steps,
                max_handovers=max_handovers)
    deploy_round(config, str(open_checkpoint(trained_run).path), 1, help, help_steps, {"source": "test"})
    return FleetStore.open(out)


@pytest.fixture(scope="module")
def continuous_round(trained_run, module_scheduler, tmp_path_factory):
    """A continuous random-gate round: 4 robots in 2 operator groups, 2 episodes each, 60 expert steps."""
    out = tmp_path_factory.mktemp("continuous") / "round"
    return deploy(trained_run, out, continuous=True, scheduler=module_scheduler)


def test_a_continuous_round_runs_each_robots_episodes_back_to_back_within_the_budget(continuous_round):
    store, timelines = continuous_round, {}
    for robot in range(4):
        data, ends, _ = columns(store.path, robot)
        assert [store.episode_info(robot, index)["seed"] for index in range(2)] == \
            [episode_seed(0, robot, index, "fleet", 1) for index in range(2)]
        timelines.setdefault(robot % 2, []).append(data["acted_by"][:, 0])  # the robot's steps, episode after episode
    ledgers = [json.loads(path.read_text()) for path in sorted((store.path / LEDGERS).glob("group_*.json"))]
    assert all(list(ledger) == ["0"] for ledger in ledgers)  # the whole round is one session
    acted = sum(int(timeline.sum()) for group in timelines.values() for timeline in group)
    assert acted == sum(ledger["0"] for ledger in ledgers) == 60  # random asks all the time: the cap binds
    for group in timelines.values():  # one operator a group: one expert at each lockstep step at most
        steps = max(len(timeline) for timeline in group)
        assert max(sum(np.pad(timeline, (0, steps - len(timeline))) for timeline in group)) <= 1


def hand_overs(store, robots):
    """Per episode, the lengths of its expert stretches."""
    episodes = []
    for robot in range(robots):
        data, ends, _ = columns(store.path, robot)
        for acted in np.split(data["acted_by"][:, 0], ends[:-1]):
            episodes.append([end - start for start, end in labelled_runs(acted.astype(bool))])
    return episodes


def test_an_episode_gets_at_most_its_hand_overs_and_the_operator_helps_others_instead(trained_run, module_scheduler,
                                                                                     tmp_path):
    """One operator over 2 robots in lockstep, 2 episodes each, a budget that never runs out."""
    one_group = {"robots": 2, "operators": 1, "help_steps": 400, "scheduler": module_scheduler}
    unlimited = deploy(trained_run, tmp_path / "unlimited", continuous=True, episodes=1, **one_group)
    # random asks at every step, so a hand-over never clears early: it lasts its 7 steps, limit or not
    limited = deploy(trained_run, tmp_path / "limited", continuous=True, max_handovers=1, min_segment_steps=2,
                     **one_group)
    assert max(len(episode) for episode in hand_overs(unlimited, 2)) > 1  # the limit binds
    assert max(len(episode) for episode in hand_overs(limited, 2)) == 1
    assert sum(len(episode) for episode in hand_overs(limited, 2)) > 2  # the operator went on to later episodes
    assert max(length for episode in hand_overs(limited, 2) for length in episode) == 7


def test_with_one_episode_a_robot_continuous_and_waves_are_the_same_round(trained_run, module_scheduler, tmp_path):
    """2 robots in lockstep under one operator, as one group of a larger fleet runs."""
    one_group = {"mode": "stall", "robots": 2, "operators": 1, "episodes": 1, "scheduler": module_scheduler}
    waves = deploy(trained_run, tmp_path / "waves", continuous=False, **one_group)
    continuous = deploy(trained_run, tmp_path / "continuous", continuous=True, **one_group)
    assert_same_stores(waves.path, continuous.path)


def test_a_round_deployed_with_other_settings_is_not_carried_on(trained_run, continuous_round, tmp_path):
    """Refused while the store is checked, before any cluster starts."""
    round = copytree(continuous_round.path, tmp_path / "round", symlinks=True)
    with pytest.raises(ValueError, match="holds a different collection: its lineage's continuous is True, not False"):
        deploy(trained_run, round, continuous=False)


def test_a_continuous_round_killed_mid_round_resumes_to_the_same_store(trained_run, pick_place_fleet, tmp_path):
    """Killed at its first commit, the round's one session (2 robots in lockstep, one operator, 2 episodes each
    back to back) has episodes left; the rerun replays the session and stores what an unbroken round stores."""
    one_group = ("--continuous", "--fleet-robots", "2", "--operators", "1")
    whole, killed = (copytree(trained_run, tmp_path / name / "run", symlinks=True) for name in ("a", "b"))
    assert fleet_learn(whole, pick_place_fleet, *one_group).returncode == 0
    assert fleet_learn(killed, pick_place_fleet, *one_group, crash_at="deploy-commit").returncode != 0
    assert FleetStore.open(killed / "fleet" / "round_1").num_episodes < 4  # killed mid-round
    resumed = fleet_learn(killed, pick_place_fleet, *one_group)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_stores(whole / "fleet" / "round_1", killed / "fleet" / "round_1")


def test_continuous_bc_is_a_one_line_error(pick_place_fleet, tmp_path):
    completed = fleet_learn(tmp_path / "run", pick_place_fleet, "--continuous", "--gate", "bc")
    assert completed.returncode == 2 and len(completed.stderr.splitlines()) == 1
    assert "--continuous deploys for the gates and dagger" in completed.stderr
