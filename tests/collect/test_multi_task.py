"""A group of tasks collected by one fleet: each robot runs one task, and every frame records which."""

import json
import subprocess
import sys

import numpy as np
import pytest
import zarr

from collect.cli import main as collect_main
from collect_helpers import subprocess_env
from dataset.manifest import robot_task
from fault_helpers import assert_one_line, exit_code_of, flip_byte
from sim.fleet import fleet_task
from sim.metaworld_tasks import GROUPS, task_name

MT10 = [task_name(task) for task in GROUPS["metaworld/mt10"]]


def stored_files(store):
    """Every data file of every robot store (the code version in zarr.json apart)."""
    return {str(path.relative_to(store)): path.read_bytes() for path in sorted(store.glob("robot_*.zarr/*/*/*"))
            if path.is_file()}


@pytest.mark.slow
def test_a_group_is_shared_out_over_the_fleet_and_every_frame_records_its_task(mt10_fleet):
    manifest = json.loads((mt10_fleet / "manifest.json").read_text())
    assert manifest["task"]["tasks"] == MT10 and manifest["task"]["name"] == "metaworld/mt10"
    assert manifest["features"]["task_index"] == {"dtype": "int64", "shape": [1], "names": None}
    for robot in range(10):
        store = zarr.open_group(mt10_fleet / f"robot_{robot:04d}.zarr", mode="r")
        assert store.attrs["task"] == robot_task(manifest, robot) == fleet_task(MT10, robot)
        assert store.attrs["env_id"] == store.attrs["task"]
        assert set(np.unique(store["data/task_index"][:])) == {MT10.index(store.attrs["task"])}
    assert sorted(robot_task(manifest, robot) for robot in range(10)) == sorted(MT10)


@pytest.mark.slow
def test_a_damaged_robot_of_a_group_is_verified_and_recollected_to_the_same_bytes(mt10_fleet, tmp_path):
    store = tmp_path / "fleet"
    subprocess.run(["cp", "-r", str(mt10_fleet), str(store)], check=True)
    flip_byte(store / "robot_0003.zarr/data/action/c.0.0")
    completed = subprocess.run([sys.executable, "-m", "collect.cli", "--repair", str(store), "--quiet"],
                               capture_output=True, text=True, env=subprocess_env())
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "repaired: recollected robots 3 (1 episodes)" in completed.stdout
    assert stored_files(store) == stored_files(mt10_fleet)


def test_a_group_with_more_tasks_than_robots_is_one_line(tmp_path, capsys):
    assert exit_code_of(collect_main, ["--task", "metaworld/mt10", "--robots", "4", "--out", tmp_path / "fleet"]) == 2
    assert_one_line(capsys.readouterr().err, "metaworld/mt10 has 10 tasks", "--robots must be at least 10")
    assert not (tmp_path / "fleet").exists()
