"""experiments/fleet_learning.py's configuration: the policy's head reaches bc.py and names every output."""

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from core.files import REPO
from core.options import parse_config
from experiments import fleet_learning
from experiments.fleet_learning import FleetLearningConfig, arm_directory, fleet_learn_command, training_options
from experiments.fleet_learning_report import (bc_bracket, bc_frames_for, bc_points, check_results_are_its_own,
                                               code_words, fresh_training, goal_curve, handover_limit_words, head_words)
from train.config import TrainConfig
from train.fleet_learn import FleetLearnConfig


def test_a_head_reaches_bc_py_and_names_the_seed_policy_every_arm_and_the_results():
    config = FleetLearningConfig(task="push", retrain="fresh", action_modes=2, mode_actions=("ee_dz",),
                                 n_action_steps=4)
    assert config.head == "_2_modes_ee_dz_4_action_steps"
    assert config.name == "fleet_learning_push_fresh_2_modes_ee_dz_4_action_steps"
    assert arm_directory(config, "stall") == Path("runs/fleet_learning_push/stall_fresh_2_modes_ee_dz_4_action_steps")
    policy = parse_config(TrainConfig, "", [*training_options(config), "--out", "unused"]).policy
    assert (policy.action_modes, policy.mode_actions, policy.n_action_steps) == (2, ("ee_dz",), 4)
    assert head_words(vars(config)) == ", a mixture of 2 modes over ee_dz, 4 actions of each chunk executed"


def test_bc_py_defaults_add_nothing_to_the_names_or_the_options():
    config = FleetLearningConfig(task="push", retrain="fresh")
    assert config.head == "" and config.name == "fleet_learning_push_fresh" and head_words(vars(config)) == ""
    assert arm_directory(config, "stall") == Path("runs/fleet_learning_push/stall_fresh")
    assert not {"--action-modes", "--mode-actions", "--n-action-steps"} & set(training_options(config))


def test_hand_overs_of_another_length_than_the_settings_are_an_arm_of_their_own():
    assert FleetLearningConfig(task="push", retrain="fresh", segment_steps=40).deployment == "_fresh"
    shorter = FleetLearningConfig(task="push", retrain="fresh", segment_steps=10)
    assert shorter.deployment == "_10_step_hand_overs_fresh"
    assert arm_directory(shorter, "stall") == Path("runs/fleet_learning_push/stall_10_step_hand_overs_fresh")
    assert FleetLearningConfig(setting="budget", segment_steps=15).deployment == ""


def test_a_hand_over_limit_reaches_fleet_learn_py_and_is_an_arm_of_its_own():
    limited = FleetLearningConfig(task="push", retrain="fresh", segment_steps=10, max_handovers=1)
    assert limited.deployment == "_10_step_hand_overs_at_most_1_an_episode_fresh"
    assert arm_directory(limited, "stall") == \
        Path("runs/fleet_learning_push/stall_10_step_hand_overs_at_most_1_an_episode_fresh")
    assert FleetLearningConfig(max_handovers=2).deployment == "_at_most_2_an_episode"
    command = fleet_learn_command(limited, "stall", Path("runs/unused/run"), 1)
    arguments = command[command.index("train/fleet_learn.py") + 1:]
    assert parse_config(FleetLearnConfig, "", arguments).max_handovers == 1
    assert handover_limit_words(vars(limited)) == ", at most 1 an episode"
    unlimited = FleetLearningConfig(task="push")
    assert "--max-handovers" not in fleet_learn_command(unlimited, "stall", Path("runs/unused/run"), 1)
    assert handover_limit_words(vars(unlimited)) == ""
    with pytest.raises(ValueError, match="must be at least 1"):
        FleetLearningConfig(max_handovers=0)


def test_a_patient_stall_gate_reaches_fleet_learn_py_and_is_an_arm_of_its_own():
    patient = FleetLearningConfig(task="push", retrain="fresh", segment_steps=10, stall_steps=50)
    assert arm_directory(patient, "stall") == \
        Path("runs/fleet_learning_push/stall_10_step_hand_overs_after_50_stalled_steps_fresh")
    command = fleet_learn_command(patient, "stall", Path("runs/unused/run"), 1)
    assert parse_config(FleetLearnConfig, "", command[command.index("train/fleet_learn.py") + 1:]).stall_steps == 50
    assert handover_limit_words(vars(patient)) == ", asked for after 50 steps without progress"
    assert "--stall-steps" not in fleet_learn_command(FleetLearningConfig(task="push"), "stall", Path("runs/r"), 1)
    with pytest.raises(ValueError, match="must be at least 1"):
        FleetLearningConfig(stall_steps=0)


def test_encoders_pretrained_each_round_reach_fleet_learn_py_and_are_an_arm_of_their_own():
    pretrained = FleetLearningConfig(task="push", retrain="fresh", segment_steps=10, pretrain_steps=1500)
    assert arm_directory(pretrained, "stall") == \
        Path("runs/fleet_learning_push/stall_10_step_hand_overs_fresh_encoders_pretrained_1500_steps")
    command = fleet_learn_command(pretrained, "stall", Path("runs/unused/run"), 1)
    parsed = parse_config(FleetLearnConfig, "", command[command.index("train/fleet_learn.py") + 1:])
    assert (parsed.pretrain_steps, parsed.retrain, parsed.policy.policy) == (1500, "fresh", "cnn")
    assert fresh_training(vars(pretrained)).endswith(", from camera encoders pretrained 1500 steps on every "
                                                     "recorded frame")
    assert "--pretrain-steps" not in fleet_learn_command(FleetLearningConfig(task="push"), "stall", Path("runs/r"), 1)
    with pytest.raises(ValueError, match="--pretrain-steps: encoders are pretrained for --retrain fresh's policies"):
        FleetLearningConfig(pretrain_steps=1500)
    with pytest.raises(ValueError, match="the mlp policy has none"):
        FleetLearningConfig(setting="state", retrain="fresh", pretrain_steps=1500)


@pytest.mark.parametrize("options, message", [
    ({"mode_actions": ("ee_dz",)}, "--mode-actions needs --action-modes 2 or more"),
    ({"action_modes": 0}, "must be at least 1"),
    ({"n_action_steps": 0}, "must be at least 1"),
])
def test_a_head_that_cannot_be_trained_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        FleetLearningConfig(**options)


def test_bc_points_keep_each_head_and_acting_in_its_own_series():
    results = REPO / "experiments/results"
    rows = [row for row in json.loads((results / "full_run_visuomotor.json").read_text())["results"]
            if row["task"] == "push" and row["policy"] == "cnn"]
    regressing = [row["policy_over_expert"] for row in rows if (row.get("action_modes") or 1) == 1]
    curve = [point for path in results.glob("*.json") for point in json.loads(path.read_text()).get("bc_curve", [])
             if point.get("encoders") != "pretrained"]

    def curve_points(n_action_steps):  # a mean over the training seeds measured on the same demonstrations
        seeds = {}
        for point in curve:
            if point["action_modes"] == 2 and point["n_action_steps"] == n_action_steps:
                seeds.setdefault((point["demos"], point["frames"]), []).append(point["over_expert"])
        return sorted((*demos_frames, sum(values) / len(values)) for demos_frames, values in seeds.items())

    at_default = bc_points("push", 40.0, "visuomotor", 2, ("ee_dz",))
    assert [point["success"] for point in at_default["full_run"]] == regressing
    # the full run's mixture point (1,000 demonstrations, 0.914) is the curve's, with its frames counted
    assert [(p["demos"], p["frames"], p["success"]) for p in at_default["same_head"]] == curve_points(8)
    assert (1000, 37822, 0.914) in curve_points(8)
    at_four = bc_points("push", 40.0, "visuomotor", 2, ("ee_dz",), n_action_steps=4)
    assert [(p["demos"], p["frames"], p["success"]) for p in at_four["same_head"]] == curve_points(4)
    assert curve_points(4)[-2][:2] == (1000, 37822)  # the same demonstrations, replanning every 4 actions
    pretrained = sorted((point["demos"], point["frames"], point["over_expert"]) for path in
                        results.glob("bc_encoders_*.json") for point in json.loads(path.read_text())["bc_curve"])
    in_their_own_series = [(p["demos"], p["frames"], p["success"]) for p in at_four["pretrained_encoders"]]
    assert pretrained and in_their_own_series == pretrained  # and not in same_head, as above
    assert bc_points("push", 40.0, "visuomotor")["same_head"] == []
    assert bc_points("push", 40.0, "visuomotor", n_action_steps=8)["same_head"] == []


def test_bc_points_of_several_training_seeds_on_the_same_demonstrations_are_their_mean(tmp_path):
    results = REPO / "experiments/results"
    for name in ("scaling_visuomotor.json", "full_run_visuomotor.json"):
        (tmp_path / name).write_text((results / name).read_text())

    def curve_point(demos, frames, over_expert, **marks):
        return {"task": "push", "inputs": "visuomotor", "action_modes": 2, "mode_actions": ["ee_dz"],
                "n_action_steps": 4, "demos": demos, "frames": frames, "over_expert": over_expert, **marks}

    files = {"seed0": [curve_point(750, 28414, 0.94), curve_point(1000, 37822, 0.96)],
             "seed1": [curve_point(750, 28414, 0.90, seed=1)],
             "seed1_again": [curve_point(750, 28414, 0.92)],  # its seed in its config only, and measured twice
             "pretrained": [curve_point(750, 28414, 0.5, encoders="pretrained")]}
    for name, points in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({"config": {"seed": 0 if name == "seed0" else 1},
                                                           "bc_curve": points}))
    bc = bc_points("push", 40.0, "visuomotor", 2, ("ee_dz",), n_action_steps=4, results=tmp_path)
    assert [(p["demos"], p["frames"], p["seeds"]) for p in bc["same_head"]] == [(750, 28414, 2), (1000, 37822, 1)]
    assert [p["success"] for p in bc["same_head"]] == pytest.approx([0.93, 0.96])
    assert [(p["demos"], p["success"]) for p in bc["pretrained_encoders"]] == [(750, 0.5)]  # not in the mean


def test_bc_frames_for_a_success_are_read_off_the_curve_between_its_neighbours():
    curve = goal_curve(bc_points("push", 40.0, "visuomotor", 2, ("ee_dz",), n_action_steps=4))
    assert bc_frames_for(curve[-1]["success"], curve) == curve[-1]["frames"]  # a recorded point is its own frames
    between = [{"frames": 1000, "success": 0.8}, {"frames": 4000, "success": 0.95}]
    assert bc_frames_for(0.9, between) == pytest.approx(2000)  # error 0.2 -> 0.05 over 4x frames: 0.1 at 2x
    assert bc_frames_for(0.2, curve) is None and bc_frames_for(0.995, curve) is None  # off the curve
    assert bc_bracket(0.9, between) == (between[0], between[1]) and bc_bracket(0.96, between) is None
    needs = [bc_frames_for(success, curve) for success in (0.5, 0.7, 0.9, 0.95, 0.98)]
    assert needs == sorted(needs)  # more success, more frames
    assert goal_curve(bc_points("push", 40.0, "visuomotor")) == bc_points("push", 40.0, "visuomotor")["full_run"]


def test_the_reports_heading_names_the_code_its_rounds_were_evaluated_with():
    rows = [{"code_version": "0.1.0+aaa"}, {"code_version": "0.1.0+aaa"}, {"code_version": "0.1.0+bbb"}]
    machine = {"code_version": "0.1.0+ccc"}
    assert code_words(rows[:2], machine) == "code 0.1.0+aaa"
    assert code_words(rows, machine) == "code 0.1.0+aaa to 0.1.0+bbb (each round's in the results' rows)"
    assert code_words([{"code_version": None}], machine) == "code 0.1.0+ccc"  # rows that do not say: the machine's


def test_a_run_from_another_seed_is_refused_before_it_replaces_a_runs_results(tmp_path, capsys):
    arguments = ["--task", "push", "--seed-robots", "9", "--out", str(tmp_path / "run"), "--results-dir",
                 str(tmp_path), "--docs", str(tmp_path / "fleet_learning.md"), "--media", str(tmp_path)]
    config = parse_config(FleetLearningConfig, "", arguments)
    (tmp_path / f"{config.name}.json").write_text(json.dumps({"config": {"task": "push", "seed_robots": 27}}))
    with pytest.raises(SystemExit) as refused:
        fleet_learning.main(arguments)
    assert refused.value.code == 2 and "another seed (--seed-robots 27)" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything was collected or written
    check_results_are_its_own(asdict(parse_config(FleetLearningConfig, "", [*arguments, "--seed-robots", "27"])),
                              config.name, tmp_path)  # the same seed carries on: no error
    named = parse_config(FleetLearningConfig, "", [*arguments, "--results-name", "push_9x10"])
    assert named.name == "push_9x10"
    check_results_are_its_own(asdict(named), named.name, tmp_path)  # its own name: nothing to replace
