"""train/distill.py: a student learns the teacher's actions, DAgger rounds write valid stores, bad inputs fail."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dataset import FleetStore
from dataset.verify import verify_store
from eval.config import EvalConfig
from eval.engine import make_jobs
from eval.plan import make_plan
from eval.rollout import evaluate_robot
from train import distill
from train.checkpoint import load_policy, open_checkpoint
from collect_helpers import REPO, subprocess_env
from fault_helpers import file_tree, flip_byte
from train_helpers import metrics, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def teacher(pick_place_fleet, tmp_path_factory):
    run = tmp_path_factory.mktemp("teacher") / "run"
    completed = train("--data", pick_place_fleet, "--out", run, "--max-steps", "30", "--hidden", "256", "256")
    assert completed.returncode == 0, completed.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def student(pick_place_fleet, teacher, tmp_path_factory):
    """Distilled on 2 ranks from robots 0 and 2 of 3: 30 steps on the store, then one DAgger round and 10 steps
    more."""
    run = tmp_path_factory.mktemp("student") / "run"
    completed = train("--teacher", teacher, "--data", pick_place_fleet, "--out", run, "--max-steps", "30",
                      "--hidden", "32", "32", "--dagger-rounds", "1", "--dagger-episodes", "2", "--dagger-steps", "10",
                      "--workers", "2", "--robots", "0", "2", ranks=2, script="distill.py")
    assert completed.returncode == 0, completed.stderr[-3000:]
    return run


@pytest.mark.cluster
def test_the_student_learns_the_teachers_actions_and_evaluate_runs_it(student, teacher, tmp_path):
    losses = [record["loss"] for record in metrics(student) if "loss" in record and record["step"] <= 30]
    assert losses[-1] < 0.7 * losses[0], losses
    checkpoint = open_checkpoint(student)
    assert checkpoint.step == 40 and checkpoint.config["teacher"] == str(teacher)
    policy, _ = load_policy(student)
    teacher_policy, _ = load_policy(teacher)
    assert sum(p.numel() for p in policy.parameters()) < sum(p.numel() for p in teacher_policy.parameters()) / 10

    config = EvalConfig(checkpoint=str(student), robots=1, episodes=2, out=str(tmp_path / "eval"))
    plan = make_plan(config)  # evaluate's plan and one robot's rollouts, without starting a dask cluster
    episodes = evaluate_robot(make_jobs(config, plan, tmp_path / "videos")[0])
    assert plan.task_name == "pick_place" and len(episodes) == 2 and all(e["error"] is None for e in episodes)


@pytest.mark.cluster
def test_a_dagger_round_is_a_valid_store_of_the_teachers_labels_on_the_students_states(student, teacher):
    round_store = FleetStore.open(student / "dagger" / "round_1")
    assert verify_store(round_store) == []
    assert round_store.robots == [0, 2] and round_store.num_episodes == 4  # --robots 0 2 limits the rollouts too
    assert round_store.manifest["lineage"]["teacher"] == str(teacher)
    labeller, pinned = load_policy(student / "dagger" / "round_1_teacher", n_action_steps=1)  # the workers' copy
    assert pinned.weights.keys() == open_checkpoint(teacher).weights.keys()
    assert all((pinned.weights[name] == value).all() for name, value in open_checkpoint(teacher).weights.items())
    episode = round_store.episode(0, 0)
    labeller.reset()
    space_low, space_high = -1.0, 1.0
    for t in range(20):  # each recorded action is what the teacher does on the state the student reached
        observation = {name: episode[name][t] for name in labeller.spec.features}
        expected = np.clip(labeller.select_action(observation), space_low, space_high)
        np.testing.assert_allclose(episode["action"][t], expected, rtol=1e-5, atol=1e-6)
    student_policy, _ = load_policy(Path(student / "dagger" / "round_1_student"))
    student_policy.reset()
    observation = {name: episode[name][0] for name in student_policy.spec.features}
    assert not np.allclose(student_policy.select_action(observation), episode["action"][0])  # the student drove


@pytest.mark.cluster
def test_dataset_info_counts_the_failed_episodes_a_dagger_round_stored(student):
    round_store = student / "dagger" / "round_1"
    completed = subprocess.run([sys.executable, "-m", "dataset.cli", "info", round_store, "--json"],
                               capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=300)
    assert completed.returncode == 0, completed.stderr
    store = FleetStore.open(round_store)
    failed = {robot: sum(not store.episode_info(robot, index)["success"]
                         for index in range(store.num_episodes_of(robot))) for robot in store.robots}
    assert sum(failed.values()) > 0  # a student of 30 steps does not place the cube
    summary = json.loads(completed.stdout)
    assert {robot["robot_id"]: robot["failed"] for robot in summary["robots"]} == failed
    assert all(robot["dropped"] == 0 for robot in summary["robots"])  # DAgger stores every episode it rolls out
    assert sum(site["failed"] for site in summary["sites"].values()) == sum(failed.values())


def one_line_error(capsys, *arguments) -> str:
    """distill.py's error for ``arguments``, run in this process; it must stop before training, in one line."""
    with pytest.raises(SystemExit) as stopped:
        distill.main([*map(str, arguments)])
    assert stopped.value.code != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_teachers_are_one_line_errors(pick_place_fleet, camera_fleet, teacher, tmp_path, capsys):
    assert "no checkpoint at" in one_line_error(capsys, "--teacher", tmp_path / "nowhere", "--data",
                                                   pick_place_fleet, "--out", tmp_path / "a")
    assert "was trained on pick_place" in one_line_error(capsys, "--teacher", teacher, "--data", camera_fleet,
                                                         "--out", tmp_path / "b")
    assert "--horizon 16 or less" in one_line_error(capsys, "--teacher", teacher, "--data", pick_place_fleet,
                                                    "--out", tmp_path / "c", "--horizon", "32")
    assert "a diffusion student is not supported" in one_line_error(
        capsys, "--teacher", teacher, "--data", pick_place_fleet, "--out", tmp_path / "d", "--policy", "diffusion")
    assert not any((tmp_path / name).exists() for name in "abcd")  # nothing was written


def test_an_out_holding_the_teacher_or_another_run_is_refused(pick_place_fleet, teacher, trained_run, tmp_path,
                                                               capsys):
    before = file_tree(teacher), file_tree(trained_run)
    assert "is the teacher's own run" in one_line_error(capsys, "--teacher", teacher, "--data", pick_place_fleet,
                                                        "--out", teacher)
    assert "holds a run of another command" in one_line_error(capsys, "--teacher", teacher, "--data",
                                                              pick_place_fleet, "--out", trained_run)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"config": {"teacher": str(tmp_path / "another_teacher")}}))
    assert f"holds a distillation of the teacher {tmp_path / 'another_teacher'}, not {teacher}" in one_line_error(
        capsys, "--teacher", teacher, "--data", pick_place_fleet, "--out", other)
    assert (file_tree(teacher), file_tree(trained_run)) == before


def test_a_damaged_store_is_one_line(pick_place_fleet, teacher, tmp_path, capsys):
    fleet = shutil.copytree(pick_place_fleet, tmp_path / "fleet")
    flip_byte(fleet / "robot_0001.zarr" / "data" / "action" / "c.0.0")
    error = one_line_error(capsys, "--teacher", teacher, "--data", fleet, "--out", tmp_path / "student")
    assert "robot_0001.zarr data/action chunk c.0.0" in error and f"collect --repair {fleet}" in error
    assert not (tmp_path / "student").exists()


def test_a_student_larger_than_its_teacher_is_warned_of(pick_place_fleet, teacher, tmp_path):
    larger = train("--teacher", teacher, "--data", pick_place_fleet, "--out", tmp_path / "s", "--max-steps", "2",
                   "--hidden", "512", "512", script="distill.py")
    assert larger.returncode == 0, larger.stderr[-2000:]
    assert "is not smaller than the teacher" in larger.stderr
    assert json.loads((tmp_path / "s" / "config.json").read_text())["config"]["policy"]["hidden"] == [512, 512]
