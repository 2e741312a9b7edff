"""One writer per output (core/lock.py): a second writer is refused in one line naming the holder, a killed
holder's lock is taken over, and every command that writes a directory takes its lock first."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager

import pytest

from collect.cli import main as collect_main
from core.lock import lock_path, output_lock
from dataset import FleetStore
from dataset.cli import main as dataset_main
from dataset.manifest import read_manifest
from eval.cli import main as evaluate_main
from sim.fleet import episode_seed
from train.bc import main as bc_main
from train.distill import main as distill_main
from train.export import main as export_main
from train.federated import main as federated_main
from train.fleet_learn import main as fleet_learn_main
from collect_helpers import REPO, collect_command, subprocess_env
from fault_helpers import assert_one_line, exit_code_of

HOLD = """
import contextlib, os, sys, time
from core.lock import output_lock
command, fork, *directories = sys.argv[1:]
with contextlib.ExitStack() as stack:
    for directory in directories:
        stack.enter_context(output_lock(directory, command))
    started = os.pipe()
    child = os.fork() if fork == "fork" else None  # a child that may outlive the holder, as a DataLoader worker
    if child == 0:
        os.write(started[1], b"1")  # the fork's hooks have run: the child's copy of each lock is closed
        time.sleep(600)
        os._exit(0)
    if child:
        os.read(started[0], 1)
    print(child, flush=True)
    time.sleep(600)
"""


@contextmanager
def holder(*directories, command: str = "collect", fork: bool = False):
    """A process holding the locks of ``directories`` as ``command`` (with a forked child); gives it and its
    child's pid. Killed, with its child, on the way out."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, command, "fork" if fork else "-", *map(str, directories)],
                               stdout=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO,
                               start_new_session=True)
    try:
        child = process.stdout.readline().strip()
        yield process, None if child == "None" else int(child)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def take(directory, rank: str) -> subprocess.CompletedProcess:
    """Take and release ``directory``'s lock in a process of torchrun rank ``rank``."""
    script = "import sys\nfrom core.lock import output_lock\nwith output_lock(sys.argv[1], 'taker'): pass"
    return subprocess.run([sys.executable, "-c", script, str(directory)], capture_output=True, text=True,
                          env={**subprocess_env(), "RANK": rank}, cwd=REPO, timeout=60)


def test_a_second_writer_is_refused_in_one_line_naming_the_holder_and_other_ranks_of_its_job_are_not(tmp_path,
                                                                                                      capsys):
    out = tmp_path / "runs" / "fleet"
    with holder(out) as (process, _):
        pid = process.pid
        assert lock_path(out) == tmp_path / "runs" / ".fleet.lock" and not out.exists()
        with pytest.raises(SystemExit) as refused:
            with output_lock(out, "collect"):
                pytest.fail("a second writer got the lock")
        assert refused.value.code == 2
        assert_one_line(capsys.readouterr().err, f"error: {out} is being written by collect (pid {pid} on host "
                        f"{socket.gethostname()}, since ", "; wait for it to finish or choose another output")
        other_rank, other_job = take(out, rank="1"), take(out, rank="0")
        assert other_rank.returncode == 0 and not other_rank.stderr
        assert other_job.returncode == 2 and "Traceback" not in other_job.stderr
        assert_one_line(other_job.stderr, f"is being written by collect (pid {pid} ")


def test_the_lock_of_a_killed_holder_is_taken_over_even_while_its_forked_child_lives(tmp_path):
    out = tmp_path / "fleet"
    with holder(out, fork=True) as (process, child):
        process.kill()  # SIGKILL, to the holder alone
        process.wait()
        assert lock_path(out).is_file()  # a kill leaves the file, and its record of the dead holder
        os.kill(child, 0)  # the child lives on
        with output_lock(out, "taker"):
            assert json.loads(lock_path(out).read_text())["pid"] == os.getpid()
        assert not lock_path(out).exists()


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_the_lock_is_released_and_its_file_removed_on_an_error_or_ctrl_c(tmp_path, error):
    out = tmp_path / "fleet"
    with pytest.raises(error):
        with output_lock(out, "collect"):
            assert json.loads(lock_path(out).read_text())["command"] == "collect"
            raise error
    assert not lock_path(out).exists()
    assert take(out, rank="0").returncode == 0


def test_every_command_that_writes_a_directory_refuses_one_another_process_writes(pick_place_fleet, tmp_path,
                                                                                  capsys):
    out, missing = tmp_path / "out", tmp_path / "missing"
    commands = [(collect_main, ["--out", out, "--robots", "1", "--episodes", "1", "--quiet"]),
                (collect_main, ["--repair", pick_place_fleet, "--quiet"]),
                (evaluate_main, ["--expert", "--task", "reach", "--quiet", "--out", out]),
                (bc_main, ["--data", missing, "--out", out]),
                (distill_main, ["--data", missing, "--teacher", missing, "--out", out]),
                (fleet_learn_main, ["--data", missing, "--out", out]),
                (federated_main, ["--data", missing, "--out", out]),
                (export_main, [missing, out]),
                (dataset_main, ["export-lerobot", pick_place_fleet, out]),
                (dataset_main, ["import-lerobot", missing, out])]
    with holder(out, pick_place_fleet, command="another run") as (process, _):
        for main, arguments in commands:
            assert exit_code_of(main, arguments) == 2, arguments
            assert_one_line(capsys.readouterr().err, f"is being written by another run (pid {process.pid} ")
    assert not out.exists() and not (pick_place_fleet / ".repair").exists()  # repair's first write: its journal


@pytest.mark.slow
def test_two_collects_into_one_out_started_together_one_writes_and_the_other_is_refused(tmp_path):
    out = tmp_path / "fleet"
    processes = {seed: subprocess.Popen(collect_command(out, "--robots", "2", "--episodes", "2", "--seed", str(seed),
                                                        "--task", "reach", "--workers", "1"),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env=subprocess_env(), cwd=REPO)
                 for seed in (0, 1)}
    results = {seed: (process.wait(timeout=300), process.stderr.read()) for seed, process in processes.items()}
    assert sorted(code for code, _ in results.values()) == [0, 2], results
    winner = next(seed for seed, (code, _) in results.items() if code == 0)
    assert_one_line(results[1 - winner][1], f"is being written by collect (pid {processes[winner].pid} ")
    verify = subprocess.run([sys.executable, "-m", "dataset.cli", "verify", str(out)], capture_output=True,
                            text=True, env=subprocess_env(), cwd=REPO, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    store = FleetStore.open(out)
    assert read_manifest(out)["seed"] == winner
    assert all(store.episode_info(robot, position)["seed"]
               == episode_seed(winner, robot, store.episode_info(robot, position)["index"])
               for robot in store.robots for position in range(store.num_episodes_of(robot)))
