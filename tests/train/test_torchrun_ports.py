"""Two torchrun jobs on one host at once: each job's agent holds the port of the store it serves from
before its workers start, so neither job races the other for a port (train/bc.py's ``attempt_store``)."""

import subprocess

import pytest

from collect_helpers import REPO
from train.checkpoint import open_checkpoint
from train_helpers import train_command, train_env


@pytest.mark.slow
@pytest.mark.cluster
def test_two_torchrun_trainings_on_one_host_run_at_once(pick_place_fleet, tmp_path):
    runs = [tmp_path / "first", tmp_path / "second"]
    jobs = [subprocess.Popen(train_command("--data", pick_place_fleet, "--out", run, "--max-steps", "20", ranks=2),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=train_env(), cwd=REPO)
            for run in runs]
    try:
        errors = [job.communicate(timeout=600)[1] for job in jobs]
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
    assert [job.returncode for job in jobs] == [0, 0], "\n".join(error[-3000:] for error in errors)
    assert [open_checkpoint(run).step for run in runs] == [20, 20]
