"""A real dask cluster for tests: a `dask scheduler` and `dask worker` processes on 127.0.0.1."""

import socket
import subprocess
import sys
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
def dask_cluster(workers: int = 2):
    """The address of a scheduler with ``workers`` one-thread workers (each under a nanny, which restarts it)."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    common = {"env": subprocess_env(), "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                                  **common)]
    processes += [
        subprocess.Popen([DASK, "worker", address, "--host", "127.0.0.1", "--nworkers", "1", "--nthreads", "1",
                          "--no-dashboard"], **common)
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
