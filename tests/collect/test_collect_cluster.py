"""collect on a real dask cluster: `dask scheduler` and two `dask worker` processes on 127.0.0.1."""


import pytest
from distributed import Client

from collect_helpers import assert_same_stores, run_collect, start_collect, wait_for_episodes
from dask_cluster import dask_cluster, free_port, kill_a_busy_worker, wait_for_workers_back
from dataset import FleetStore
from dataset.verify import verify_store

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


@pytest.fixture(scope="module")
def scheduler_address():
    with dask_cluster(workers=2) as address:
        yield address


ARGUMENTS = ("--robots", "3", "--episodes", "4", "--task", "push")


def test_collection_on_an_external_cluster_equals_a_local_one(scheduler_address, tmp_path):
    local = tmp_path / "local"
    assert run_collect(local, *ARGUMENTS, "--workers", "2").returncode == 0
    remote = tmp_path / "remote"
    completed = run_collect(remote, *ARGUMENTS, "--scheduler", scheduler_address)
    assert completed.returncode == 0, completed.stderr
    assert_same_stores(local, remote)


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(scheduler_address, tmp_path):
    arguments = ("--robots", "4", "--episodes", "40", "--task", "pick_place", "--flush-frames", "100")
    reference = tmp_path / "reference"
    assert run_collect(reference, *arguments, "--workers", "2").returncode == 0

    out = tmp_path / "out"
    process = start_collect(out, *arguments, "--scheduler", scheduler_address)
    wait_for_episodes(out, 1, process)
    with Client(scheduler_address) as client:
        kill_a_busy_worker(client, lambda: process.poll() is None)
        assert process.wait(timeout=240) == 0, process.stderr.read()
        wait_for_workers_back(client)
    store = FleetStore.open(out)
    assert verify_store(store) == []
    assert_same_stores(reference, out)


def test_an_unreachable_scheduler_is_a_one_line_error(tmp_path):
    out = tmp_path / "out"
    completed = run_collect(out, *ARGUMENTS, "--scheduler", f"tcp://127.0.0.1:{free_port()}")
    assert completed.returncode != 0
    assert "cannot reach dask scheduler" in completed.stderr and "Traceback" not in completed.stderr
    assert not out.exists()
