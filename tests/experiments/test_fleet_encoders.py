"""experiments/fleet_encoders.py's and bc_encoders.py's options: a fleet run must have finished the rounds it names,
behaviour cloning needs a store."""

import json

import pytest

from experiments.bc_encoders import BCEncodersConfig
from experiments.fleet_encoders import FleetEncodersConfig


def test_the_rounds_must_be_finished_and_the_encoders_sit_beside_the_runs(tmp_path):
    run = tmp_path / "run"
    (run / "fleet").mkdir(parents=True)
    (run / "fleet" / "accounts.json").write_text(json.dumps({"rounds": [{"round": 0}, {"round": 1}]}))
    config = FleetEncodersConfig(fleet_run=str(run), rounds=1, out="runs/probe")
    assert config.encoders == "runs/probe_pretrained"
    with pytest.raises(ValueError, match="has not finished round 2"):
        FleetEncodersConfig(fleet_run=str(run), rounds=2)


def test_bc_encoders_needs_a_store_and_keeps_the_encoders_beside_the_run(camera_fleet):
    config = BCEncodersConfig(data=str(camera_fleet), out="runs/bc_probe")
    assert config.encoders == "runs/bc_probe_pretrained"
    with pytest.raises(ValueError, match="--data runs/nowhere is not a collect store"):
        BCEncodersConfig(data="runs/nowhere")
