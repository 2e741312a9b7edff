"""A reader that stops reading (``command | head -1``) changes nothing but what is read: every command
carries on, exits 0, and shows no traceback (core/errors.py's ``quiet_closed_pipes``)."""

import os
import subprocess
import sys

import pytest

from collect_helpers import REPO, subprocess_env
from train_helpers import train_command, train_env
from train.checkpoint import open_checkpoint


def first_line_then_closed(command: list, stderr_path, env: dict) -> tuple[str, int, str]:
    """Run ``command`` with a reader that closes its stdout after the first line, as ``| head -1`` does:
    the line, the command's exit code and its stderr."""
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   env=env, cwd=REPO)
        first = process.stdout.readline()
        process.stdout.close()
        code = process.wait(timeout=600)
    return first, code, stderr_path.read_text()


def assert_quiet(stderr: str) -> None:
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr and "Exception ignored" not in stderr, stderr


def test_writes_to_a_closed_stdout_or_stderr_go_nowhere(tmp_path):
    """Flushed lines, a buffered rest that only the exit flushes, and warnings, each to a reader that has gone."""
    script = ("from core.errors import quiet_closed_pipes, warn; quiet_closed_pipes(); "
              "print('first', flush=True); import time; time.sleep(0.5); print('more ' * 10000); "
              "warn('unread'); print('last')")
    first, code, stderr = first_line_then_closed([sys.executable, "-c", script], tmp_path / "stderr", subprocess_env())
    assert (first, code, stderr) == ("first\n", 0, "warning: unread\n")

    reader, writer = os.pipe()
    os.close(reader)  # a stderr nobody reads any more
    try:
        closed_stderr = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=writer,
                                       env=subprocess_env(), cwd=REPO, timeout=60, text=True)
    finally:
        os.close(writer)
    assert closed_stderr.returncode == 0 and closed_stderr.stdout.endswith("last\n"), closed_stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", ["collect", "evaluate"])
def test_collect_and_evaluate_finish_quietly_when_the_reader_stops_after_one_line(tmp_path, command):
    """Their first line (the dask dashboard) is flushed at the start; the summary comes after the reader left."""
    arguments = {"collect": ["-m", "collect.cli", "--robots", "2", "--episodes", "1", "--task", "reach"],
                 "evaluate": ["-m", "eval.cli", "--expert", "--task", "reach", "--robots", "2", "--episodes", "1"]}
    first, code, stderr = first_line_then_closed(
        [sys.executable, *arguments[command], "--workers", "1", "--out", tmp_path / "out"], tmp_path / "stderr",
        subprocess_env())
    assert first.startswith("dask dashboard:") and code == 0, stderr[-3000:]
    assert_quiet(stderr)
    assert (tmp_path / "out" / ("manifest.json" if command == "collect" else "eval_info.json")).is_file()


@pytest.mark.slow
def test_training_carries_on_when_the_reader_stops_after_one_line(pick_place_fleet, tmp_path):
    """bc.py's progress lines find the reader gone; it trains to the end and every checkpoint is whole."""
    run = tmp_path / "run"
    first, code, stderr = first_line_then_closed(
        train_command("--data", pick_place_fleet, "--out", run, "--max-steps", "30", "--checkpoint-interval", "10"),
        tmp_path / "stderr", train_env())
    assert first.startswith("training ") and code == 0, stderr[-3000:]
    assert_quiet(stderr)
    checkpoints = sorted((run / "checkpoints").glob("step_*"))
    assert [open_checkpoint(path).step for path in checkpoints] == [10, 20, 30]
    assert open_checkpoint(run).step == 30
