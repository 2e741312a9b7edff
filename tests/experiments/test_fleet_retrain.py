"""experiments/fleet_retrain.py: a fresh policy trained on a fleet-learning run's seed plus its rounds' labels."""

import json

import numpy as np
import pytest

from dataset import FleetStore
from dataset.episodes import select_episodes
from experiments import fleet_retrain
from fault_helpers import assert_one_line, exit_code_of
from fleet_helpers import columns, fleet_learn
from train.checkpoint import open_checkpoint
from train.fleet.labels import labelled_runs
from train_helpers import QUICK

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def labelled_stretches(store_path, robots: int) -> int:
    """How many stretches of expert-labelled frames a round's store holds, episode by episode."""
    stretches = 0
    for robot in range(robots):
        robot_columns, ends, _ = columns(store_path, robot)
        for start, end in zip(np.concatenate([[0], ends[:-1]]), ends):
            stretches += len(labelled_runs(robot_columns["labelled"][start:end, 0].astype(bool)))
    return stretches


def test_a_fresh_policy_trains_on_the_seed_and_every_finished_rounds_labels(pick_place_fleet, tmp_path, capsys):
    fleet_run = tmp_path / "fleet"
    completed = fleet_learn(fleet_run, pick_place_fleet)  # one round on 4 robots, the policy at step 25
    assert completed.returncode == 0, completed.stderr[-3000:]
    fresh = tmp_path / "fresh"
    arguments = [*QUICK, "--data", pick_place_fleet, "--fleet-run", fleet_run, "--out", fresh, "--max-steps", "10",
                 "--val-fraction", "0"]
    fleet_retrain.main([*map(str, arguments), "--rounds", "1"])
    out = capsys.readouterr().out
    seed = len(select_episodes(FleetStore.open(pick_place_fleet)))
    stretches = labelled_stretches(fleet_run / "fleet" / "round_1", robots=4)
    assert stretches > 0 and f"from {seed + stretches} episodes" in out
    assert "with the expert's labels from 1 deployment round(s)" in out
    assert open_checkpoint(fresh).step == 10  # trained from initialisation, not carried on from step 25
    saved = json.loads((fresh / "config.json").read_text())["config"]
    assert saved["rounds"] == 1 and saved["fleet_run"] == str(fleet_run)

    assert exit_code_of(fleet_retrain.main, [*arguments, "--out", tmp_path / "other", "--rounds", "2"]) == 2
    assert_one_line(capsys.readouterr().err, f"--fleet-run {fleet_run} has not finished round 2")
