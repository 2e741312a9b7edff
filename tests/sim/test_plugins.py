"""Outside tasks: by module:attr reference and by entry point, with the README's example; a task a file
names imports code only on the user's word."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sim
from collect_helpers import REPO, run_collect, subprocess_env
from fault_helpers import assert_one_line
from sim.demo import DemoConfig, run_demo
from sim.rollout import run_episode
from sim.tasks import ENTRY_POINT_GROUP, TaskSpec, available_tasks, recorded_task, resolve_task
from train.checkpoint import open_checkpoint
from train_helpers import QUICK

EXAMPLES = REPO / "docs" / "examples"


@pytest.fixture
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_module_reference_resolves_to_a_working_task(example_on_path):
    spec = resolve_task("mountain_car_task:TASK")
    assert isinstance(spec, TaskSpec) and spec.name == "mountain_car"
    profile = sim.make_robot(0)
    env, expert = spec.make_env(profile), spec.make_expert(profile)
    episode = run_episode(env, expert, seed=0, reset_policy=expert.reset, record=True)
    assert episode.success
    assert set(episode.frames) >= {"observation.state", "action"}


def _install_entry_point(directory: Path) -> None:
    """A minimal installed distribution whose only content is one robofleet.tasks entry point."""
    dist_info = directory / "robofleet_toy_tasks-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: robofleet-toy-tasks\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nmountain_car = mountain_car_task:TASK\n")


def test_entry_point_task_is_found_by_name_and_runs_in_the_demo(tmp_path, example_on_path, monkeypatch):
    _install_entry_point(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "mountain_car" in available_tasks()
    assert resolve_task("mountain_car").env_id == "example/MountainCar-v0"
    results = run_demo(DemoConfig(tasks=("mountain_car",), robots=3, episodes=2, quiet=True))
    assert all(all(flags) for flags in results["mountain_car"].values())


def test_demo_command_accepts_a_reference_on_the_command_line():
    env = {"PYTHONPATH": f"{EXAMPLES}", "PATH": "/usr/bin:/bin"}
    completed = subprocess.run(
        [sys.executable, "-m", "sim.demo", "--tasks", "mountain_car_task:TASK", "--robots", "2", "--episodes", "1", "--quiet"],
        capture_output=True, text=True, env=env, cwd=EXAMPLES.parent.parent, check=True,
    )
    assert "mountain_car: success per site" in completed.stdout


@pytest.mark.parametrize(
    "reference, message",
    [
        ("no_such_module:TASK", "cannot load task reference"),
        ("sim.fleet:SITES", "not a sim.TaskSpec"),
        ("teleport", "unknown task 'teleport'"),
    ],
)
def test_bad_task_names_give_clear_errors(reference, message):
    with pytest.raises(ValueError, match=message):
        resolve_task(reference)


def test_a_task_a_file_names_is_imported_only_when_the_user_names_it(planted_module):
    for given in (None, "other:TASK", "pick_place"):
        with pytest.raises(ValueError, match=r"^checkpoint.json names the plug-in task 'planted:TASK', which would "
                                             r"import code: .*pass --task planted:TASK if you trust it$"):
            recorded_task("planted:TASK", given, "checkpoint.json")
    assert not planted_module.exists() and "planted" not in sys.modules
    assert recorded_task("pick_place", None, "checkpoint.json") is resolve_task("pick_place")
    assert recorded_task("robofleet/Push-v0", None, "checkpoint.json") is resolve_task("push")
    with pytest.raises(ValueError, match="unknown task 'teleport'"):
        recorded_task("teleport", None, "checkpoint.json")
    with pytest.raises(ValueError, match="not a sim.TaskSpec"):  # the user's word imports it
        recorded_task("planted:TASK", "planted:TASK", "checkpoint.json")
    assert planted_module.exists()


def test_an_installed_entry_point_a_file_names_resolves(tmp_path, example_on_path, monkeypatch):
    _install_entry_point(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert recorded_task("mountain_car", None, "manifest.json").env_id == "example/MountainCar-v0"


def test_short_names_and_env_ids_name_the_same_task():
    assert resolve_task("pick_place") is resolve_task("robofleet/PickPlace-v0")


def test_cameras_are_refused_for_a_task_without_them(example_on_path):
    with pytest.raises(ValueError, match="does not support cameras"):
        resolve_task("mountain_car_task:TASK").make_env(sim.make_robot(0), cameras=("front",))


@pytest.mark.slow
def test_a_plug_in_task_is_remembered_from_collect_to_evaluate(tmp_path):
    """Collected with --task module:attr, trained and evaluated without naming the task again."""
    with_module = {**subprocess_env(), "PYTHONPATH": f"{EXAMPLES}{os.pathsep}{subprocess_env()['PYTHONPATH']}"}

    def run(*command, env=with_module) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *map(str, command)], capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=600)

    fleet, trained, evaluation = tmp_path / "fleet", tmp_path / "run", tmp_path / "eval"
    completed = run("-m", "collect.cli", "--task", "mountain_car_task:TASK", "--robots", "2", "--episodes", "3",
                    "--workers", "1", "--out", fleet, "--quiet")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads((fleet / "manifest.json").read_text())["task"]["reference"] == "mountain_car_task:TASK"
    completed = run(REPO / "train" / "bc.py", "--data", fleet, "--out", trained, *QUICK, "--max-steps", "5",
                    "--val-fraction", "0")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert open_checkpoint(trained).task["reference"] == "mountain_car_task:TASK"

    # the checkpoint names the task, but its module is imported only on the user's word
    completed = run("-m", "eval.cli", "--checkpoint", trained, "--out", evaluation, "--quiet")
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert_one_line(completed.stderr, "names the plug-in task 'mountain_car_task:TASK', which would import code",
                    "pass --task mountain_car_task:TASK")
    assert not evaluation.exists()
    completed = run("-m", "eval.cli", "--checkpoint", trained, "--task", "mountain_car_task:TASK", "--robots", "2",
                    "--episodes", "1", "--workers", "1", "--out", evaluation, "--quiet")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads((evaluation / "eval_info.json").read_text())["task"] == "mountain_car"


@pytest.mark.slow
def test_collect_refuses_a_task_whose_reset_seed_does_not_fix_the_episode(tmp_path):
    out = tmp_path / "fleet"
    completed = run_collect(out, "--task", "toy_tasks:NOISY_REACH", "--robots", "2", "--episodes", "1",
                            "--workers", "1")
    assert completed.returncode == 2
    assert_one_line(completed.stderr, "error: task 'toy_tasks:NOISY_REACH' is not deterministic: two resets with seed",
                    "observation.environment_state at reset", "--no-check-determinism")
    assert not out.exists()
