"""Fault tolerance: SIGKILL a real rank of a torchrun job; torchrun restarts it and training resumes."""

import os
import signal
import subprocess
import time

import pytest

import psutil

from collect_helpers import REPO
from train_helpers import metrics, train_command, train_env

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def wait_for_checkpoint(run, job: subprocess.Popen, timeout: float = 300) -> str:
    """The name of the first checkpoint RUN/checkpoints/last points at."""
    last = run / "checkpoints" / "last"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if last.is_symlink():
            return os.readlink(last)
        assert job.poll() is None, f"the job ended before its first checkpoint: {job.communicate()[1][-3000:]}"
        time.sleep(0.02)
    raise AssertionError(f"no checkpoint after {timeout} s")


def rank_process(launcher_pid: int, rank: int) -> psutil.Process:
    """The worker process of ``rank`` among torchrun's children (its RANK environment variable)."""
    for child in psutil.Process(launcher_pid).children():
        if child.environ().get("RANK") == str(rank):
            return child
    raise AssertionError(f"no worker with RANK={rank} under torchrun {launcher_pid}")


def test_a_killed_rank_restarts_from_the_last_checkpoint_and_finishes_in_sync(pick_place_fleet, tmp_path):
    """Rank 0 (the one that writes checkpoints and metrics) dies by SIGKILL after the first checkpoint.

    torchrun (--max-restarts=1) stops rank 1 and starts both again; they resume from the
    checkpoint ``last`` pointed at when rank 0 died, and the run finishes its 400 steps with
    the ranks in sync and each logged step once, in order.
    """
    run = tmp_path / "run"
    command = train_command("--data", pick_place_fleet, "--out", run, "--max-steps", "400", "--log-interval", "10",
                            "--checkpoint-interval", "20", "--val-interval", "1000", ranks=2,
                            launcher_options=("--max-restarts=1",))
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=train_env(),
                           cwd=REPO)
    try:
        checkpoint_at_kill = wait_for_checkpoint(run, job)
        rank_process(job.pid, 0).send_signal(signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr[-3000:]
    resumed = [line for line in stdout.splitlines() if "resumed from step" in line]
    assert len(resumed) == 1, stdout[-3000:]
    resumed_step = int(resumed[0].rsplit("resumed from step ", 1)[1])
    assert resumed_step >= int(checkpoint_at_kill.removeprefix("step_")) >= 20
    records = metrics(run)
    steps = [record["step"] for record in records if "loss" in record]
    assert steps == list(range(10, 401, 10))
    assert records[-1] == {"step": 400, "ranks_in_sync": True, "world_size": 2}
