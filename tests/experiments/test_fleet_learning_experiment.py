"""experiments/fleet_learning.py at a tiny size: two gates from one seed policy, a round each, resumed; and
experiments/fleet_rohe.py on its seed policy."""

import json

import pytest

from collect_helpers import git_status
from experiments import fleet_learning, fleet_rohe

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_a_tiny_run_writes_rows_accounts_and_a_plot_and_a_rerun_redoes_nothing_and_rohe_cells_deploy_its_seed(
        tmp_path, capsys):
    docs = tmp_path / "runs"  # each run's page is docs/NAME.md
    status = git_status()
    arguments = ["--setting", "state", "--gates", "random", "stall", "--seed-robots", "2", "--seed-episodes", "2",
                 "--hidden", "16", "--batch-size", "8", "--ranks", "1", "--seed-steps", "10", "--rounds", "1",
                 "--round-steps", "5", "--fleet-robots", "3", "--deploy-episodes", "1", "--operators", "1",
                 "--help-steps", "60", "--eval-robots", "3", "--eval-episodes", "1", "--held-out-robots", "2",
                 "--held-out-episodes", "1", "--workers", "1",
                 "--out", str(tmp_path / "run"), "--docs", str(docs), "--media", str(tmp_path / "media"),
                 "--results-dir", str(tmp_path)]
    result = fleet_learning.main(arguments)
    assert json.loads((tmp_path / "fleet_learning_state.json").read_text())["rows"] == result["rows"]
    assert [(row["gate"], row["round"]) for row in result["rows"]] == [("random", 0), ("random", 1), ("stall", 0),
                                                                       ("stall", 1)]
    seed = result["rows"][0]["labelled_so_far"]
    for row in result["rows"]:
        assert row["ci95"][0] <= row["success"] <= row["ci95"][1]
        assert row["code_version"].startswith("0.1.0+")  # the code the round's evaluation recorded
        if row["round"] == 1:
            deployment = row["deployment"]
            assert deployment["episodes"] == 3 and 0 < deployment["labelled"] <= 60
            assert row["labelled_so_far"] == seed + deployment["labelled"] and row["step"] == 15
    assert result["rows"][0]["step"] == result["rows"][2]["step"] == 10  # both gates start from one seed policy
    held_out = json.loads((tmp_path / "run" / "stall" / "eval_round_1_held_out" / "eval_info.json").read_text())
    assert [robot["robot_id"] for robot in held_out["per_robot"]] == [3, 4]  # past the 3 deployed robots
    assert all("held_out" in row for row in result["rows"])
    text = (docs / "fleet_learning_state.md").read_text()
    assert "<!-- fleet_learning_state:start -->" in text and "| stall | 1 | 15 |" in text
    assert "python -m experiments.fleet_learning --setting state --gates random stall" in text
    assert (tmp_path / "media" / "fleet_learning_state_pick_place.png").stat().st_size > 0
    assert git_status() == status
    capsys.readouterr()
    fleet_learning.main(arguments)
    assert "done in" not in capsys.readouterr().out  # every stage was finished: nothing ran again

    continuous = [*arguments, "--gates", "stall", "--deploy-episodes", "2", "--continuous", "--retrain", "fresh",
                  "--held-out-robots", "0"]  # the held-out evaluations are asserted above: not again here
    result = fleet_learning.main(continuous)  # another schedule: an arm of its own beside the same seed
    # round 1 evaluates the fresh policy, trained from initialisation for --round-steps
    assert [(row["gate"], row["round"], row["step"]) for row in result["rows"]] == [("stall", 0, 10), ("stall", 1, 5)]
    assert result["rows"][1]["deployment"]["episodes"] == 6
    arm = tmp_path / "run" / "stall_2x_continuous_fresh" / "run" / "fleet"
    assert json.loads((arm / "round_1" / "manifest.json").read_text())["lineage"]["continuous"] is True
    evaluated = json.loads((tmp_path / "run" / "stall_2x_continuous_fresh" / "eval_round_1" / "eval_info.json")
                           .read_text())
    assert evaluated["config"]["checkpoint"].endswith("fleet/round_1_trained")
    assert (tmp_path / "fleet_learning_state_2x_continuous_fresh.json").exists()
    assert ("(state, pick_place, 2 episodes a robot each round, continuously, a fresh policy each round)"
            in (docs / "fleet_learning_state_2x_continuous_fresh.md").read_text())
    assert "train the seed policy: finished earlier" in capsys.readouterr().out

    rohe_docs = tmp_path / "rohe.md"
    rohe = ["--source", str(tmp_path / "run"), "--caps", "0", "30", "--gates", "random", "stall", "--fleet-robots",
            "3", "--deploy-episodes", "1", "--operators", "1", "--workers", "1", "--out", str(tmp_path / "rohe"),
            "--policies", str(tmp_path / "run" / "seed_policy"), str(tmp_path / "run" / "stall" / "run"),
            "--docs", str(rohe_docs), "--media", str(tmp_path / "media"), "--results-dir", str(tmp_path)]
    result = fleet_rohe.main(rohe)
    assert list(result["alone"]) == ["seed_policy", "run"]  # the seed policy, and the stall arm's after its round
    assert all(alone["labelled"] == 0 and alone["episodes"] == 3 for alone in result["alone"].values())
    assert [(c["policy_name"], c["gate"], c["cap"]) for c in result["cells"]] == [
        ("seed_policy", "random", 30), ("seed_policy", "stall", 30), ("run", "random", 30), ("run", "stall", 30)]
    for random, stall in (result["cells"][:2], result["cells"][2:]):
        assert 0 < random["labelled"] <= 30 and random["rohe"] == 1000 * random["successes"] / random["labelled"]
        assert random["rohe_over_random"] == (1.0 if random["rohe"] else None)  # None: random bought no success
        assert stall["rohe_over_random"] == (stall["rohe"] / random["rohe"] if stall["labelled"] and random["rohe"]
                                             else None)
    assert (tmp_path / "rohe" / "run" / "cap_30" / "stall").is_dir()
    text = rohe_docs.read_text()
    assert "| 30 | " in text and "| run | " in text and (tmp_path / "media" / "fleet_rohe.png").stat().st_size > 0
    assert fleet_rohe.main(rohe)["cells"] == result["cells"]  # a rerun adds no episode to any cell
