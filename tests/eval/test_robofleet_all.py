"""robofleet/all from cameras: the four built-in tasks collected by one fleet, one policy trained on them with its
task as an input, and evaluated per task beside the expert; what cannot be mixed is one line."""

import json

import pytest
import zarr

from collect.cli import main as collect_main
from collect_helpers import collected
from dataset import FleetStore
from dataset.manifest import robot_features
from dataset.verify import verify_store
from eval import EvalConfig, run_evaluation
from fault_helpers import assert_one_line, exit_code_of
from sim.fleet import fleet_task, make_robot
from sim.tasks import TASK_GROUPS, resolve_task
from train.checkpoint import open_checkpoint
from train_helpers import train, train_here

TASKS = list(TASK_GROUPS["robofleet/all"])
ENVIRONMENT_STATE = "observation.environment_state"


@pytest.fixture(scope="module")
def four_task_fleet(tmp_path_factory):
    """4 robots (one per task) x 1 episode with 32x32 front and wrist cameras. Read-only."""
    return collected(tmp_path_factory, "robofleet_all", "--task", "robofleet/all", "--robots", "4", "--episodes", "1",
                     "--cameras", "front", "wrist", "--image-size", "32", "--workers", "2")


def test_fewer_robots_than_tasks_is_one_line(tmp_path, capsys):
    assert exit_code_of(collect_main, ["--task", "robofleet/all", "--robots", "3", "--out", tmp_path / "fleet"]) == 2
    assert_one_line(capsys.readouterr().err, "robofleet/all has 4 tasks", "--robots must be at least 4")


@pytest.mark.slow
def test_each_robot_store_holds_its_own_tasks_environment_state_and_verifies_clean(four_task_fleet):
    manifest = json.loads((four_task_fleet / "manifest.json").read_text())
    assert manifest["task"]["tasks"] == TASKS and ENVIRONMENT_STATE not in manifest["features"]
    for robot in range(4):
        task = fleet_task(TASKS, robot)
        env = resolve_task(task).make_env(make_robot(robot))
        width = env.observation_space[ENVIRONMENT_STATE].shape[0]
        env.close()
        attrs = zarr.open_group(four_task_fleet / f"robot_{robot:04d}.zarr", mode="r").attrs
        assert attrs["task"] == task and dict(attrs["features"]) == robot_features(manifest, robot)
        assert attrs["features"][ENVIRONMENT_STATE]["shape"] == [width]
    assert sorted({manifest["task"]["features"][task][ENVIRONMENT_STATE]["shape"][0] for task in TASKS}) == [3, 10, 14]
    assert verify_store(FleetStore.open(four_task_fleet)) == []


@pytest.mark.slow
@pytest.mark.parametrize("policy, inputs", [("mlp", "state"), ("cnn", "state+cameras")])
def test_a_policy_that_reads_the_tasks_own_environment_state_is_one_line(four_task_fleet, tmp_path, policy, inputs):
    completed = train_here("--data", four_task_fleet, "--out", tmp_path / "run", "--policy", policy, "--inputs", inputs,
                           "--max-steps", "1")
    assert completed.returncode != 0
    assert_one_line(completed.stderr, f"--inputs {inputs} reads {ENVIRONMENT_STATE}", "reach [3]", "stack [14]",
                    "reads --inputs proprio+cameras")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_one_camera_policy_of_the_four_tasks_is_evaluated_per_task_beside_the_expert(four_task_fleet, tmp_path):
    run = tmp_path / "run"
    completed = train("--data", four_task_fleet, "--out", run, "--policy", "cnn", "--inputs", "proprio+cameras",
                      "--max-steps", "10", "--batch-size", "8", "--val-fraction", "0")
    assert completed.returncode == 0, completed.stderr[-3000:]
    checkpoint = open_checkpoint(run)
    assert checkpoint.task["tasks"] == TASKS and checkpoint.spec.task_count == 4
    assert list(checkpoint.spec.features) == ["observation.state", "observation.images.front",
                                              "observation.images.wrist", "task_index"]

    info = run_evaluation(EvalConfig(checkpoint=str(run), robots=4, episodes=1, compare=True, workers=2, quiet=True,
                                     out=str(tmp_path / "eval")))
    assert info["task"] == "robofleet/all" and info["setup"]["tasks"] == TASKS
    assert [r["error"] for r in info["per_episode"]] == [None] * 4
    for agent in (info, info["expert"]):
        assert sorted(agent["per_task"]) == sorted(TASKS)
        assert {row["robot_id"]: row["task"] for row in agent["per_robot"]} == {k: fleet_task(TASKS, k)
                                                                             for k in range(4)}
    assert {f"task {task}" for task in TASKS} <= set(info["compare"])
