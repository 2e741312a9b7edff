"""Running ``collect`` as users do (a subprocess) and comparing fleet stores."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dataset import FleetStore

HELPERS = Path(__file__).resolve().parent  # tests/helpers: on the path of the tests and of every process they start
REPO = HELPERS.parent.parent


def collect_command(out: Path, *arguments: str) -> list[str]:
    return [sys.executable, "-m", "collect.cli", "--out", str(out), "--quiet", *arguments]


def subprocess_env() -> dict:
    """The environment of a process a test starts: it imports the repository's packages and these helpers."""
    return {**os.environ, "PYTHONPATH": f"{HELPERS}{os.pathsep}{REPO}"}


def git_status() -> str:
    """``git status`` of the repository, untracked files listed one by one: what a command changed in it."""
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], capture_output=True, text=True,
                          cwd=REPO, check=True).stdout


def run_collect(out: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(collect_command(out, *arguments), capture_output=True, text=True, env=subprocess_env(),
                          cwd=REPO, timeout=300)


def collected(tmp_path_factory, name: str, *arguments: str) -> Path:
    """A fleet collected once with ``arguments`` (for session- and module-scoped fixtures)."""
    out = tmp_path_factory.mktemp(name) / "fleet"
    completed = run_collect(out, *arguments)
    assert completed.returncode == 0, completed.stderr
    return out


def default_sigint() -> None:
    """A ``preexec_fn``: the child takes Ctrl-C as a terminal's foreground job does.

    A process started in the background by a shell without job control (``cmd &`` in a
    script) inherits SIGINT ignored, and so do its children; Python then never raises
    KeyboardInterrupt, and an interrupted run would go on to the end.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_collect(out: Path, *arguments: str) -> subprocess.Popen:
    return subprocess.Popen(collect_command(out, *arguments), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=subprocess_env(), cwd=REPO, start_new_session=True,
                            preexec_fn=default_sigint)


def wait_for_episodes(out: Path, at_least: int, process: subprocess.Popen, timeout: float = 120) -> int:
    """Poll until the store under ``out`` shows ``at_least`` committed episodes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (out / "manifest.json").exists():
            count = FleetStore.open(out).num_episodes
            if count >= at_least:
                return count
        if process.poll() is not None:
            raise AssertionError(f"collect ended early: {process.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError(f"no {at_least} committed episodes after {timeout} s")


def interrupt(process: subprocess.Popen) -> int:
    """Ctrl-C, as a terminal sends it: SIGINT to the whole process group."""
    os.killpg(process.pid, signal.SIGINT)
    return process.wait(timeout=60)


def assert_same_stores(first: Path, second: Path) -> None:
    """Two collections hold the same robots, episodes, metadata and arrays, bit for bit."""
    a, b = FleetStore.open(first), FleetStore.open(second)
    assert a.robots == b.robots
    for robot in a.robots:
        assert a.num_episodes_of(robot) == b.num_episodes_of(robot), robot
        for index in range(a.num_episodes_of(robot)):
            assert a.episode_info(robot, index) == b.episode_info(robot, index)
            left, right = a.episode(robot, index), b.episode(robot, index)
            assert left.keys() == right.keys()
            for key in left:
                np.testing.assert_array_equal(left[key], right[key], err_msg=f"robot {robot} episode {index} {key}")
