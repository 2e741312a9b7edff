"""Torch threads: each training process takes its share of the host's cores (train/threads.py)."""

import os
import subprocess
import sys

import pytest
import torch

from collect_helpers import REPO, subprocess_env
from fault_helpers import exit_code_of
from train import threads
from train.bc import main as bc_main
from train.config import TrainConfig
from train.monitor import Monitor
from train.threads import ThreadShare, usable_cores
from train_helpers import train

HOLDER = "from train.threads import ThreadShare; import sys, time; ThreadShare(ranks=int(sys.argv[1])); " \
         "print('registered', flush=True); time.sleep(600)"


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A registry of this test's own: processes started with this TMPDIR share it."""
    monkeypatch.setattr(threads, "REGISTRY", tmp_path / "robofleet-training")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    yield threads.REGISTRY
    torch.set_num_threads(usable_cores())


def hold_ranks(ranks: int) -> subprocess.Popen:
    """Another training process on the host, standing for ``ranks`` ranks until it is killed."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(ranks)], stdout=subprocess.PIPE, text=True,
                               env=subprocess_env(), cwd=REPO)
    assert process.stdout.readline() == "registered\n"
    return process


@pytest.mark.slow
def test_a_run_shares_the_cores_with_the_other_training_ranks_and_takes_them_back(registry):
    alone = ThreadShare()
    assert alone.threads == usable_cores() == torch.get_num_threads()
    other = hold_ranks(3)
    try:
        assert alone.refresh(force=True) == max(1, usable_cores() // 4) == torch.get_num_threads()
        assert "/ 4 training ranks on this host" in alone.describe()
    finally:
        other.kill()
        other.wait()
    assert alone.refresh(force=True) == usable_cores()  # the killed process's entry is removed
    assert [entry.name for entry in registry.iterdir()] == [str(os.getpid())]
    alone.close()
    assert not any(registry.iterdir())


def test_a_run_that_fails_leaves_the_registry_though_its_process_carries_on(registry, tmp_path):
    (tmp_path / "empty").mkdir()
    assert exit_code_of(bc_main, ["--data", tmp_path / "empty", "--out", tmp_path / "run", "--max-steps", "1"]) == 2
    # else every later run on this host (a test suite's, a sweep's) would count this process as a training rank
    assert not any(registry.iterdir())


def test_a_job_counts_its_own_local_ranks_and_threads_fixes_the_count(registry, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert ThreadShare().threads == max(1, usable_cores() // 2)  # its other rank has not registered yet
    fixed = ThreadShare(requested=3)
    assert fixed.threads == 3 == torch.get_num_threads()
    assert fixed.describe() == "3 torch thread(s) per rank (--threads)"
    assert fixed.refresh(force=True) == 3


def test_the_sync_efficiency_warning_names_thread_oversubscription(registry, tmp_path, capsys):
    crowded = ThreadShare(requested=usable_cores() + 1)
    phrase = crowded.oversubscription()
    assert phrase == (f"1 training rank(s) x {usable_cores() + 1} torch thread(s) oversubscribe the host's "
                      f"{usable_cores()} cores")
    (tmp_path / "run").mkdir()
    monitor = Monitor(tmp_path / "run", TrainConfig(out=str(tmp_path / "run")), start_step=0,
                      oversubscription=crowded.oversubscription)
    monitor.log({"step": 1, "loss": 1.0, "sync_efficiency": 0.5})
    monitor.close()
    assert f"ranks spend 50% of their step communicating; {phrase}: give each rank fewer --threads" \
        in capsys.readouterr().err


@pytest.mark.slow
def test_the_start_line_says_the_thread_count(pick_place_fleet, tmp_path):
    completed = train("--data", pick_place_fleet, "--out", tmp_path / "run", "--max-steps", "1", "--threads", "1")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "; 1 torch thread(s) per rank (--threads)" in completed.stdout.splitlines()[0]
