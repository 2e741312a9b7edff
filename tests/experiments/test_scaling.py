"""experiments/scaling.py: the power-law fit, and the whole experiment at a tiny size, resumed."""

import json

import numpy as np
import pytest

from experiments import scaling, scaling_report


def test_the_fit_recovers_a_known_power_law_and_where_it_reaches_ninety_percent():
    demos = np.array([10, 30, 90, 270, 810, 18, 45, 180, 360])
    noise = np.exp(0.02 * np.sin(np.arange(len(demos))))  # small, fixed, multiplicative
    fit = scaling_report.fit_power_law(demos.tolist(), (0.8 * demos ** -0.45 * noise).tolist())
    assert fit["exponent"] == pytest.approx(-0.45, abs=0.02) and fit["constant"] == pytest.approx(0.8, rel=0.1)
    assert 0.99 < fit["r2"] <= 1.0 and fit["n_points"] == len(demos)
    exact = scaling_report.fit_power_law([10, 100, 1000], [0.4, 0.2, 0.1])
    assert exact["r2"] == pytest.approx(1.0) and scaling_report.demos_to_reach(exact) == pytest.approx(1000)
    assert scaling_report.demos_to_reach({**exact, "exponent": 0.1}) is None  # an error that grows never gets there
    assert scaling_report.fit_power_law([20, 20], [0.3, 0.2]) is None  # one amount of data: no slope


@pytest.mark.slow
@pytest.mark.cluster
def test_a_tiny_run_writes_points_fits_and_plots_and_a_rerun_skips_every_finished_stage(tmp_path, capsys):
    docs = tmp_path / "scaling.md"
    docs.write_text("# Scaling\n\nText before the table stays.\n")
    arguments = ["--tasks", "reach", "--robots", "1", "2", "--episodes", "2", "--fixed-episodes", "2",
                 "--fixed-robots", "2", "--seeds", "0", "--min-steps", "20", "--max-steps", "20", "--hidden", "16",
                 "--batch-size", "8", "--ranks", "1", "--eval-robots", "3", "--eval-episodes", "1", "--workers", "1",
                 "--out", str(tmp_path / "run"), "--docs", str(docs), "--media", str(tmp_path / "media"),
                 "--results-dir", str(tmp_path)]
    result = scaling.main(arguments)
    assert json.loads((tmp_path / "scaling.json").read_text())["points"] == result["points"]
    assert result["held_out_robots"] == [2, 3, 4]  # past the 2 robots collected: no point trained on them
    assert {(p["robots"], p["episodes_per_robot"], s["seed"]) for p in result["points"] for s in p["seeds"]} == \
        {(1, 2, 0), (2, 2, 0)}
    assert [p["sweeps"] for p in result["points"]] == [["robots"], ["robots", "episodes"]]
    for point in result["points"]:
        success = point["success"]
        assert point["steps"] == 20 and success["n_episodes"] == 3
        assert success["ci95"][0] <= success["pc_success"] <= success["ci95"][1]
        assert success["min"] <= success["pc_success"] <= success["max"]
        for site in point["per_site"].values():
            assert site["ci95"][0] <= site["pc_success"] <= site["ci95"][1]
    for robots in (1, 2):  # robots 0..k-1 of the collection, each robot's first 2 episodes
        log = tmp_path / "run" / "reach" / f"r{robots}_e2" / "seed0" / "train.log"
        assert f"from {2 * robots} episodes (0 held out)" in log.read_text()
    fits = result["fits"]["reach"]
    for sweep in ("robots", "all"):
        assert {"exponent", "constant", "r2", "demos_to_reach_target"} <= set(fits[sweep]["fit"])
        assert "measured_reach" in fits[sweep]
    assert fits["episodes"]["fit"] is None  # one point: no slope
    assert result["statements"][0].startswith("**reach**: 90% of the expert at about")
    text = docs.read_text()
    assert text.startswith("# Scaling\n\nText before the table stays.") and "<!-- scaling_data:start -->" in text
    assert "| reach | robots, episodes | 2 x 2 | 4 | 20 |" in text
    assert "python -m experiments.scaling --tasks reach" in text
    for sweep in ("robots", "episodes"):
        assert (tmp_path / "media" / f"scaling_{sweep}.png").stat().st_size > 0
        assert f"(media/scaling_{sweep}.png)" in text
    capsys.readouterr()

    resumed = scaling.main(arguments)
    output = capsys.readouterr().out
    assert output.count("finished earlier, skipped") == 5  # the expert, and each point's training and evaluation
    assert " train: done in" not in output and " evaluate: done in" not in output
    assert resumed["points"] == result["points"] and resumed["fits"] == result["fits"]


def test_the_visuomotor_setting_trains_the_cnn_from_cameras_into_results_of_its_own(tmp_path):
    config = scaling.ScalingConfig(setting="visuomotor")
    assert (config.policy, config.inputs, config.cameras, config.tasks, config.seeds) == (
        "cnn", "proprio+cameras", ("front", "wrist"), ("pick_place", "push"), (0, 1))
    assert (config.name, config.section, config.out) == ("scaling_visuomotor", "scaling_data_visuomotor",
                                                         "runs/scaling_visuomotor")
    collect = scaling.collect_command(config, "pick_place", tmp_path)
    assert collect[collect.index("--cameras"):collect.index("--cameras") + 5] == [
        "--cameras", "front", "wrist", "--image-size", "64"]
    assert collect[collect.index("--robots") + 1] == "27" and collect[collect.index("--episodes") + 1] == "20"
    train = scaling.train_command(config, tmp_path, tmp_path / "run", 3, 10, 0, 64)
    assert train[train.index("--policy") + 1] == "cnn" and train[train.index("--inputs") + 1] == "proprio+cameras"
    assert scaling.ScalingConfig(setting="visuomotor", seeds=(3,)).seeds == (3,)  # what is set stands
    assert "--cameras" not in scaling.collect_command(scaling.ScalingConfig(), "push", tmp_path)


def test_an_unknown_setting_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        scaling.main(["--setting", "pixels"])
    assert exit_info.value.code == 2 and "--setting must be one of state, visuomotor" in capsys.readouterr().err
