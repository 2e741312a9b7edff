"""evaluate on a real dask cluster (`dask scheduler` + two `dask worker` processes): same results, lost workers retried."""

import json
import subprocess
import sys

import pytest
from distributed import Client

from collect_helpers import REPO, subprocess_env
from dask_cluster import dask_cluster, free_port, kill_a_busy_worker, wait_for_workers_back

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

# The scripted expert needs no checkpoint; its episodes run the same engine and rollout code as a policy's.
ARGUMENTS = ("--expert", "--task", "pick_place", "--robots", "4", "--episodes", "24", "--quiet")


def evaluate_command(out, *arguments) -> list[str]:
    return [sys.executable, "-m", "eval.cli", "--out", str(out), *ARGUMENTS, *arguments]


def episodes(out) -> list[dict]:
    return json.loads((out / "eval_info.json").read_text())["per_episode"]


@pytest.fixture(scope="module")
def scheduler_address():
    with dask_cluster(workers=2) as address:
        yield address


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval_local") / "eval"
    completed = subprocess.run(evaluate_command(out, "--workers", "2"), capture_output=True, text=True,
                               env=subprocess_env(), cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return out


def test_an_external_cluster_gives_the_local_clusters_results(scheduler_address, local_run, tmp_path):
    out = tmp_path / "eval"
    completed = subprocess.run(evaluate_command(out, "--scheduler", scheduler_address), capture_output=True,
                               text=True, env=subprocess_env(), cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert episodes(out) == episodes(local_run)


def test_a_worker_killed_mid_run_is_retried_and_nothing_is_lost(scheduler_address, local_run, tmp_path):
    out = tmp_path / "eval"
    process = subprocess.Popen(evaluate_command(out, "--scheduler", scheduler_address), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO)
    with Client(scheduler_address) as client:
        kill_a_busy_worker(client, lambda: process.poll() is None)
        assert process.wait(timeout=300) == 0, process.stderr.read()
        wait_for_workers_back(client)
    assert episodes(out) == episodes(local_run)


def test_an_unreachable_scheduler_is_a_one_line_error(tmp_path):
    out = tmp_path / "eval"
    completed = subprocess.run(evaluate_command(out, "--scheduler", f"tcp://127.0.0.1:{free_port()}"),
                               capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=120)
    assert completed.returncode == 2
    assert "cannot reach dask scheduler" in completed.stderr and "Traceback" not in completed.stderr
    assert not out.exists() and not list(tmp_path.glob(".eval.*"))
