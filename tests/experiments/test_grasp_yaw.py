"""experiments/grasp_yaw.py: success against the squaring turn at reset, per site and band."""

import json
from pathlib import Path

import numpy as np
import pytest

from experiments import grasp_yaw
from sim.experts import squaring_turn
from sim.fleet import episode_seed, make_robot
from sim.tasks import resolve_task


def fake_evaluation(directory, task="pick_place", robots=3, episodes=4):
    """An eval_info.json as evaluate writes it, over real robots and seeds (every other episode failed)."""
    per_episode = [{"robot_id": robot, "site": make_robot(robot, 0).site, "seed": episode_seed(0, robot, i, "evaluate"),
                    "success": i % 2 == 0} for robot in range(robots) for i in range(episodes)]
    directory.mkdir()
    (directory / "eval_info.json").write_text(json.dumps(
        {"task": task, "setup": {"fleet_seed": 0}, "checkpoint": None, "per_episode": per_episode}))
    return per_episode


def test_the_turn_is_the_experts_and_the_bands_count_every_episode(tmp_path):
    per_episode = fake_evaluation(tmp_path / "eval")
    result = grasp_yaw.main(["--evaluations", str(tmp_path / "eval"), "--results-dir", str(tmp_path)])
    (evaluation,) = result["evaluations"]
    counted = [row for rows in evaluation["per_site"].values() for row in rows]
    assert sum(row["episodes"] for row in counted) == len(per_episode)
    assert sum(row["successes"] for row in counted) == sum(e["success"] for e in per_episode)
    assert json.loads((tmp_path / "grasp_yaw.json").read_text())["evaluations"] == result["evaluations"]

    spec, profile = resolve_task("pick_place"), make_robot(0, 0)
    env, expert = spec.make_env(profile), spec.make_expert(profile)
    observation, _ = env.reset(seed=per_episode[0]["seed"])
    expert._parse(observation)
    assert squaring_turn(observation) == pytest.approx(expert._yaw_to_cube())
    assert abs(squaring_turn(observation)) <= np.pi / 4
    env.close()


def test_a_later_count_keeps_the_recorded_evaluations_with_the_same_bands(tmp_path):
    for name in ("first", "second"):
        fake_evaluation(tmp_path / name, robots=1, episodes=2)
    grasp_yaw.main(["--evaluations", str(tmp_path / "first"), "--results-dir", str(tmp_path)])
    result = grasp_yaw.main(["--evaluations", str(tmp_path / "second"), "--results-dir", str(tmp_path)])
    assert [Path(e["evaluation"]).name for e in result["evaluations"]] == ["first", "second"]
    assert [e["measured"]["command"].split()[-3] for e in result["evaluations"]] == [str(tmp_path / "first"),
                                                                                     str(tmp_path / "second")]
    rebanded = grasp_yaw.main(["--evaluations", str(tmp_path / "second"), "--bands", "0", "45",
                               "--results-dir", str(tmp_path)])
    assert [Path(e["evaluation"]).name for e in rebanded["evaluations"]] == ["second"]


def test_a_task_without_a_cube_is_refused(tmp_path, capsys):
    fake_evaluation(tmp_path / "eval", task="reach", robots=1, episodes=1)
    with pytest.raises(SystemExit):
        grasp_yaw.main(["--evaluations", str(tmp_path / "eval"), "--results-dir", str(tmp_path)])
    assert "the squaring turn is defined for push, pick_place, stack" in capsys.readouterr().err
    assert not (tmp_path / "grasp_yaw.json").exists()
