"""A real dask cluster for tests: a `dask scheduler` and `dask worker` processes on 127.0.0.1."""

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from distributed import Client

from collect_helpers import subprocess_env

DASK = str(Path(sys.executable).parent / "dask")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def dask_cluster(workers: int = 2, preload: tuple[str, ...] = ()):
    """The address of a scheduler with ``workers`` one-thread workers (each under a nanny, which restarts it).

    Each worker process imports the modules in ``preload`` before it joins, a restarted one too.
    """
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    common = {"env": subprocess_env(), "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                                  **common)]
    preloads = [option for module in preload for option in ("--preload", module)]
    processes += [
        subprocess.Popen([DASK, "worker", address, "--host", "127.0.0.1", "--nworkers", "1", "--nthreads", "1",
                          "--no-dashboard", *preloads], **common)
        for _ in range(workers)
    ]
    try:
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(workers, timeout=60)
        yield address
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def kill_a_busy_worker(client: Client, still_running, timeout: float = 120) -> None:
    """SIGKILL the process of a worker that is running a task, once one is; ``still_running()`` guards the wait.

    A task can finish between asking who is busy and asking that worker its pid, so both are retried together.
    """
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline and still_running(), "no worker took a task"
        busy = [worker for worker, tasks in client.processing().items() if tasks]
        pids = list(client.run(os.getpid, workers=busy[:1]).values()) if busy else []
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            return
        time.sleep(0.05)


def wait_for_workers_back(client: Client, workers: int = 2, timeout: float = 60) -> None:
    """Wait until the nannies have restarted killed workers, so the next test has the whole cluster."""
    deadline = time.monotonic() + timeout
    while len(client.scheduler_info()["workers"]) < workers and time.monotonic() < deadline:
        time.sleep(0.2)
