"""experiments/fleet_encoders.py's and bc_encoders.py's options: a fleet run must have finished the rounds it names,
behaviour cloning needs a store, and trains from random encoders without pretraining."""

import json

import pytest

from collect_helpers import run_collect
from dataset import FleetStore
from experiments.bc_encoders import BCEncodersConfig
from experiments.fleet_encoders import FleetEncodersConfig, behaviour_cloning_curve, cnn_options, goal_measure


def run_through_round_1(tmp_path):
    """A fleet-learning run's folder whose accounts have finished rounds 0 and 1."""
    run = tmp_path / "run"
    (run / "fleet").mkdir(parents=True)
    (run / "fleet" / "accounts.json").write_text(json.dumps({"rounds": [{"round": 0}, {"round": 1}]}))
    return run


def test_the_rounds_must_be_finished_and_the_encoders_sit_beside_the_runs(tmp_path):
    run = run_through_round_1(tmp_path)
    config = FleetEncodersConfig(fleet_run=str(run), rounds=1, out="runs/probe")
    assert config.encoders == "runs/probe_pretrained"
    with pytest.raises(ValueError, match="has not finished round 2"):
        FleetEncodersConfig(fleet_run=str(run), rounds=2)


def test_the_goal_reads_the_seeds_mean_against_behaviour_clonings_curve_with_the_same_head(tmp_path):
    run = run_through_round_1(tmp_path)
    push_seed = tmp_path / "push_seed"
    assert run_collect(push_seed, "--robots", "1", "--episodes", "1", "--task", "push", "--workers", "1").returncode == 0
    config = FleetEncodersConfig(fleet_run=str(run), rounds=1, data=str(push_seed), action_modes=2,
                                 mode_actions=("ee_dz",), n_action_steps=4)
    curve = behaviour_cloning_curve(config, FleetStore.open(push_seed))
    assert curve and all(point["demos"] >= 90 for point in curve)  # push's curve with the mixture head, acting 4
    on_a_point = curve[-2]
    goal = goal_measure(on_a_point["success"], on_a_point["frames"] // 5, curve)
    assert goal["bc_frames"] == on_a_point["frames"] and goal["share_of_bc"] == pytest.approx(0.2, abs=1e-4)
    assert on_a_point["frames"] in goal["bc_bracket"]  # a measured point is an end of its own bracket
    assert goal_measure(0.999, 1000, curve) == {"over_expert": 0.999, "bc_frames": None, "share_of_bc": None,
                                                "bc_bracket": None}  # beyond BC's measured points: no share


def test_bc_encoders_needs_a_store_and_keeps_the_encoders_beside_the_run(camera_fleet):
    config = BCEncodersConfig(data=str(camera_fleet), out="runs/bc_probe")
    assert config.encoders == "runs/bc_probe_pretrained"
    with pytest.raises(ValueError, match="--data runs/nowhere is not a collect store"):
        BCEncodersConfig(data="runs/nowhere")


def test_bc_encoders_without_pretraining_trains_from_random_encoders(camera_fleet):
    config = BCEncodersConfig(data=str(camera_fleet), out="runs/bc_probe", pretrain_steps=0)
    assert config.encoders == ""
    assert "--init-encoders" not in cnn_options(config, seed=0)
    assert cnn_options(BCEncodersConfig(data=str(camera_fleet), out="runs/bc_probe"), seed=0)[-2:] == [
        "--init-encoders", "runs/bc_probe_pretrained"]
    with pytest.raises(ValueError, match="--pretrain-steps -1 is negative"):
        BCEncodersConfig(data=str(camera_fleet), pretrain_steps=-1)
    with pytest.raises(ValueError, match="--encoders needs --pretrain-steps above 0"):
        BCEncodersConfig(data=str(camera_fleet), pretrain_steps=0, encoders="runs/enc")
