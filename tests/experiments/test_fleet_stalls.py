"""experiments/fleet_stalls.py: what the policy was doing before each hand-over, sorted from a real round store."""

import json

import numpy as np
import pytest
import zarr

from experiments import fleet_stalls
from experiments.fleet_stalls import KINDS, FleetStallsConfig, height_turns, stall_kind
from fault_helpers import assert_one_line
from fleet_helpers import deployment
from train.fleet.labels import EXPERT

CONFIG = FleetStallsConfig(rounds=("unused",))


def test_height_turns_count_legs_of_at_least_the_travel():
    assert height_turns(np.linspace(0.0, 0.1, 20), 0.01) == 0  # one rise
    assert height_turns(np.array([0.0, 0.03, 0.0, 0.03, 0.0]), 0.01) == 3
    assert height_turns(np.array([0.0, 0.005, 0.0, 0.005, 0.0]), 0.01) == 0  # wiggles under the travel
    assert height_turns(np.array([0.05, 0.02, 0.021, 0.06]), 0.01) == 1  # down, then up


def test_a_hand_beside_the_object_that_goes_up_and_down_is_bobbing():
    beside, away = np.zeros((5, 2)), np.array([[0.0, 0.0]] * 4 + [[0.1, 0.0]])
    up_and_down, level = np.array([0.0, 0.03, 0.0, 0.03, 0.0]), np.full(5, 0.02)
    assert stall_kind(beside, up_and_down, np.zeros((5, 2)), CONFIG) == KINDS[0]
    assert stall_kind(beside, level, np.zeros((5, 2)), CONFIG) == KINDS[1]
    assert stall_kind(away, up_and_down, np.zeros((5, 2)), CONFIG) == KINDS[2]


def craft_hand_over(store, robot, at, hand_z, hand_xy_offset):
    """Robot ``robot``'s first episode: the expert takes over at frame ``at``; before it, the hand moves as given."""
    group = zarr.open_group(store / f"robot_{robot:04d}.zarr", mode="r+")
    group["data/acted_by"][at] = EXPERT
    state, environment = group["data/observation.state"], group["data/observation.environment_state"]
    rows = slice(at - len(hand_z), at)
    crafted = state[rows]
    crafted[:, 13:15] = environment[rows][:, 0:2] + hand_xy_offset
    crafted[:, 15] = hand_z
    state[rows] = crafted


@pytest.mark.slow
def test_each_hand_over_of_a_round_is_sorted_once(trained_run, tmp_path):
    out = tmp_path / "round_1"
    deployment(trained_run, out, mode="random", robots=2, episodes=2, operators=1, random_rate=1e-12)  # never helped
    craft_hand_over(out, 0, 12, np.tile([0.10, 0.13], 5), 0.0)
    craft_hand_over(out, 1, 12, np.full(10, 0.10), 0.2)
    result = fleet_stalls.main(["--rounds", str(out), "--window", "10", "--results-dir", str(tmp_path)])
    (row,) = result["rounds"]
    assert row["episodes"] == 4 and row["hand_overs"] == 2
    assert row["kinds"] == {KINDS[0]: 1, KINDS[1]: 0, KINDS[2]: 1}
    assert json.loads((tmp_path / "fleet_stalls.json").read_text())["rounds"] == result["rounds"]


def test_a_store_that_is_not_a_round_is_refused_in_one_line(pick_place_fleet, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        fleet_stalls.main(["--rounds", str(pick_place_fleet), "--results-dir", str(tmp_path)])
    assert exit_info.value.code != 0
    assert_one_line(capsys.readouterr().err, "is not a fleet-learning round")
