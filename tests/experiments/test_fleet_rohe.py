"""experiments/fleet_rohe.py's ROHE ratios and their paired bootstrap intervals, on crafted cells."""

import numpy as np
import pytest

from experiments.fleet_rohe import FleetRoheConfig, over_random, results_name


def cell(gate: str, robots: dict[str, list[int]], policy: str = "seed_policy") -> dict:
    successes, labelled = (sum(counts[i] for counts in robots.values()) for i in (0, 1))
    return {"policy_name": policy, "cap": 100, "gate": gate, "rohe": 1000 * successes / labelled if labelled else None, "robots": robots}


def test_a_gate_spending_half_the_frames_everywhere_has_twice_the_rohe_with_no_spread():
    rng = np.random.default_rng(1)
    random_robots = {str(r): [int(rng.integers(1, 3)), int(rng.integers(10, 40)) * 2] for r in range(20)}
    cells = [cell("random", random_robots), cell("stall", {r: [s, f // 2] for r, (s, f) in random_robots.items()})]
    over_random(cells)
    random, stall = cells
    assert random["rohe_over_random"] == 1.0 and random["rohe_over_random_95"] is None
    assert stall["rohe_over_random"] == pytest.approx(2.0) and stall["rohe_over_random_95"] == pytest.approx([2, 2])


def test_the_interval_holds_the_ratio_and_widens_when_robots_disagree():
    rng = np.random.default_rng(2)
    random_robots = {str(r): [2, 30] for r in range(40)}
    steady = {str(r): [2, 20] for r in range(40)}
    erratic = {str(r): [2, int(rng.choice([5, 35]))] for r in range(40)}
    cells = [cell("random", random_robots), cell("stall", steady), cell("fleet", erratic)]
    over_random(cells)
    _, steady_cell, erratic_cell = cells
    for measured in (steady_cell, erratic_cell):
        low, high = measured["rohe_over_random_95"]
        assert low <= measured["rohe_over_random"] <= high
    assert np.diff(erratic_cell["rohe_over_random_95"]) > np.diff(steady_cell["rohe_over_random_95"])


def test_no_ratio_where_the_random_gate_bought_no_success():
    cells = [cell("random", {"0": [0, 10]}), cell("stall", {"0": [1, 10]})]
    over_random(cells)
    assert [c["rohe_over_random"] for c in cells] == [None, None]


def test_each_policy_is_set_beside_its_own_random_cell():
    weak, strong = {str(r): [1, 30] for r in range(10)}, {str(r): [2, 30] for r in range(10)}
    cells = [cell("random", weak, "weak"), cell("random", strong, "strong"), cell("stall", strong, "weak"),
             cell("stall", weak, "strong")]
    over_random(cells)
    assert [c["rohe_over_random"] for c in cells] == [1.0, 1.0, pytest.approx(2.0), pytest.approx(0.5)]


def test_policies_that_do_not_exist_or_share_a_name_are_refused(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        FleetRoheConfig(policies=(str(tmp_path / "nowhere"),))
    for run in ("a", "b"):
        (tmp_path / run / "seed_policy").mkdir(parents=True)
    with pytest.raises(ValueError, match="distinct directory names"):
        FleetRoheConfig(policies=(str(tmp_path / "a" / "seed_policy"), str(tmp_path / "b" / "seed_policy")))


def test_a_run_with_a_hand_over_limit_keeps_its_own_results_and_a_limit_below_one_is_refused(tmp_path):
    (tmp_path / "seed_policy").mkdir()
    policy = (str(tmp_path / "seed_policy"),)
    assert results_name(FleetRoheConfig(policies=policy)) == "fleet_rohe"
    assert results_name(FleetRoheConfig(policies=policy, max_handovers=2)) == "fleet_rohe_2_handovers"
    with pytest.raises(ValueError, match="--max-handovers must be at least 1"):
        FleetRoheConfig(policies=policy, max_handovers=0)
