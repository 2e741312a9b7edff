"""Federated rounds on a real dask cluster: failing, hanging and killed clients are left out, and the run goes on."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from distributed import Client

from dask_cluster import dask_cluster, free_port, kill_a_busy_worker, wait_for_workers_back
from federated_helpers import (QUICK, configure, metrics, only_robot_0_works, robot_1_raises, robot_2_hangs_in_round_1,
                               slow_and_announced)
from train.checkpoint import latest_checkpoint, open_checkpoint
from train.federated import main, run_federated

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


@pytest.fixture(scope="module")
def scheduler_address():
    """Workers that load torch before they join, so a deadline times training alone: a worker restarted after a
    hung client is back only once it has (importing torch on its first task took a loaded machine past 15 s)."""
    with dask_cluster(workers=2, preload=("train.fed.fedavg",)) as address:
        yield address


def last_round(run) -> int:
    return open_checkpoint(latest_checkpoint(run)).step


def test_a_failing_client_is_left_out_and_the_run_goes_on(pick_place_fleet, scheduler_address, tmp_path):
    run = tmp_path / "run"
    run_federated(configure(pick_place_fleet, run, "--rounds", "2", "--scheduler", scheduler_address),
                  train=robot_1_raises)
    assert last_round(run) == 2
    for record in metrics(run):
        assert record["applied"] and record["completed"] == [0, 2]
        assert record["failed"] == {"1": "RuntimeError: robot 1 lost its camera"}


def test_a_hanging_client_is_dropped_at_the_deadline_and_its_worker_restarted(pick_place_fleet, scheduler_address,
                                                                             tmp_path):
    run = tmp_path / "run"
    run_federated(configure(pick_place_fleet, run, "--rounds", "2", "--deadline", "15",
                            "--scheduler", scheduler_address), train=robot_2_hangs_in_round_1)
    first, second = metrics(run)
    assert first["applied"] and first["completed"] == [0, 1] and first["late"] == [2]
    assert second["completed"] == [0, 1, 2]  # the hung worker was restarted: robot 2 trains again in round 2
    assert first["bytes_up"] < second["bytes_up"] and first["bytes_down"] == second["bytes_down"]


def test_too_few_clients_repeat_the_round_then_stop_with_a_clear_message(pick_place_fleet, scheduler_address,
                                                                        tmp_path, capsys):
    run = tmp_path / "run"
    config = configure(pick_place_fleet, run, "--rounds", "2", "--min-completed", "0.6", "--round-attempts", "2",
                       "--scheduler", scheduler_address)
    with pytest.raises(SystemExit) as exit_info:
        run_federated(config, train=only_robot_0_works)
    assert exit_info.value.code == 3
    error = capsys.readouterr().err
    assert "round 1: fewer than 60% of the clients completed in 2 attempts" in error and "stopping" in error
    assert [(r["round"], r["attempt"], r["applied"]) for r in metrics(run)] == [(1, 0, False), (1, 1, False)]
    assert latest_checkpoint(run) is None  # the global model never took a short round


def test_a_worker_killed_mid_round_is_tolerated(pick_place_fleet, scheduler_address, tmp_path):
    run = tmp_path / "run"
    config = configure(pick_place_fleet, run, "--rounds", "2", "--scheduler", scheduler_address)
    with ThreadPoolExecutor(1) as pool, Client(scheduler_address) as client:
        training = pool.submit(run_federated, config, slow_and_announced)
        deadline = time.monotonic() + 120
        while not list(run.glob("started-round1-*")):
            assert time.monotonic() < deadline and not training.done()
            time.sleep(0.05)
        kill_a_busy_worker(client, lambda: not training.done())
        training.result(timeout=300)
        wait_for_workers_back(client)
    records = metrics(run)
    assert last_round(run) == 2 and [r["round"] for r in records] == [1, 2] and all(r["applied"] for r in records)
    first = records[0]  # the killed robot's task was rerun elsewhere (completed), or it is left out
    assert sorted(first["completed"] + [int(r) for r in first["failed"]] + first["late"]) == [0, 1, 2]


def test_an_unreachable_scheduler_is_a_one_line_error(pick_place_fleet, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--data", str(pick_place_fleet), "--out", str(tmp_path / "run"), *QUICK,
              "--scheduler", f"tcp://127.0.0.1:{free_port()}"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "cannot reach dask scheduler" in error and len(error.splitlines()) == 1
