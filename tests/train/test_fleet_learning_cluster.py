"""A fleet-learning round on a real dask cluster (`dask scheduler` and two `dask worker` processes on 127.0.0.1),
with a worker killed mid-round."""

import shutil
import subprocess

import pytest
from distributed import Client

from collect_helpers import REPO, assert_same_stores, wait_for_episodes
from dask_cluster import dask_cluster, kill_a_busy_worker, wait_for_workers_back
from dataset import FleetStore
from dataset.verify import verify_store
from fleet_helpers import fleet_learn, fleet_learn_command
from train_helpers import train_env

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

LONGER = ("--deploy-episodes", "6")  # long enough to kill a worker in the middle


def test_a_worker_killed_mid_round_loses_and_duplicates_no_episode(trained_run, pick_place_fleet, tmp_path):
    reference, run = (shutil.copytree(trained_run, tmp_path / name / "run", symlinks=True) for name in ("a", "b"))
    assert fleet_learn(reference, pick_place_fleet, *LONGER).returncode == 0
    with dask_cluster(workers=2) as address, Client(address) as client:
        process = subprocess.Popen(fleet_learn_command(run, pick_place_fleet, *LONGER, "--scheduler", address),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=train_env(),
                                   cwd=REPO, start_new_session=True)
        wait_for_episodes(run / "fleet" / "round_1", 1, process, timeout=300)
        kill_a_busy_worker(client, lambda: process.poll() is None)
        assert process.wait(timeout=300) == 0, process.stderr.read()[-3000:]
        wait_for_workers_back(client)
    store = FleetStore.open(run / "fleet" / "round_1")
    assert verify_store(store) == [] and store.num_episodes == 4 * 6
    assert_same_stores(reference / "fleet" / "round_1", run / "fleet" / "round_1")
