"""How many torch threads a training process uses: its share of the host's cores.

A training process (a bc.py or distill.py rank, a federated server for its clients)
registers in a directory every process on the host sees, with the number of ranks it
stands for, while it runs. Its automatic share is the cores it may run on divided by
the ranks registered on the host, and at least by its own job's local ranks; a run
counts again every few seconds, so a run started alone steps down when a second one
starts and back up when it ends. ``--threads N`` fixes the count instead.

Why: torch's default is one thread per core in every process. Two runs on one host
then put two threads on each core, and OpenMP threads that wait for each other at every
parallel region each lose a scheduler slice: two bc.py runs on one host trained many
times slower than with one thread each (docs/performance.md).
"""

from __future__ import annotations

import atexit
import os
import tempfile
import time
from pathlib import Path

import torch

REGISTRY = Path(tempfile.gettempdir()) / "robofleet-training"  # one file per training process on the host
RECOUNT_S = 2.0  # how often a run counts the host's training ranks again


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def local_world_size() -> int:
    """The ranks of this job on this host: torchrun's LOCAL_WORLD_SIZE, else 1."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def _start_time(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot), to tell it from a later process given the same id."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _forget(entry: Path) -> None:
    """Remove a dead process's entry (another user's stays: the sticky directory keeps it theirs)."""
    try:
        entry.unlink(missing_ok=True)
    except OSError:
        pass


def _registered_ranks() -> int:
    """The ranks the live processes of the registry stand for; entries of dead processes are removed."""
    ranks = 0
    for entry in REGISTRY.glob("*") if REGISTRY.is_dir() else []:
        try:
            pid, (started, count) = int(entry.name), entry.read_text().split()
        except (OSError, ValueError):  # gone, or being written
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            _forget(entry)
            continue
        except PermissionError:  # another user's process: alive
            pass
        if _start_time(pid) in ("", started):  # "": no /proc to tell a reused id by
            ranks += int(count)
        else:
            _forget(entry)
    return ranks


class ThreadShare:
    """This process's torch threads: ``requested`` (``--threads``), or with 0 its share of the host's cores.

    ``ranks`` is what the process stands for in the registry (1 for a training rank, the
    client workers for a federated server), ``local_ranks`` its job's ranks on this host.
    """

    def __init__(self, requested: int = 0, ranks: int = 1, local_ranks: int | None = None):
        self.requested, self.local_ranks = requested, local_ranks or local_world_size()
        self.entry = REGISTRY / str(os.getpid())
        self.next_count = 0.0
        try:  # a registry this user cannot write to leaves the count to this job's own ranks
            REGISTRY.mkdir(exist_ok=True)
            if REGISTRY.stat().st_uid == os.getuid():
                REGISTRY.chmod(0o1777)  # every user's runs share the host's cores
            self.entry.write_text(f"{_start_time(os.getpid())} {ranks}\n")
            atexit.register(self.close)
        except OSError:
            pass
        self.threads, self.ranks = 0, self.local_ranks
        self.refresh(force=True)

    def count_ranks(self) -> int:
        """The training ranks on this host, this job's included (kept as ``ranks``)."""
        self.ranks = max(self.local_ranks, _registered_ranks())
        return self.ranks

    def refresh(self, force: bool = False) -> int:
        """Count again (at most every ``RECOUNT_S`` unless ``force``) and set torch's threads; the count."""
        if self.requested:
            threads = self.requested
        elif force or time.monotonic() >= self.next_count:
            self.next_count = time.monotonic() + RECOUNT_S
            threads = max(1, usable_cores() // self.count_ranks())
        else:
            return self.threads
        if threads != self.threads:
            torch.set_num_threads(threads)
            self.threads = threads
        return threads

    def describe(self, per: str = "rank") -> str:
        """The count and where it came from, for a start line (``per`` rank, or per client)."""
        if self.requested:
            return f"{self.threads} torch thread(s) per {per} (--threads)"
        return (f"{self.threads} torch thread(s) per {per} ({usable_cores()} cores / {self.ranks} "
                "training ranks on this host)")

    def oversubscription(self) -> str:
        """A phrase naming thread oversubscription where this host's cores are oversubscribed, else ''."""
        cores, ranks = usable_cores(), self.count_ranks()
        if self.threads * ranks > cores:
            return f"{ranks} training rank(s) x {self.threads} torch thread(s) oversubscribe the host's {cores} cores"
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        if load >= cores + 1:
            return f"the host's load average is {load:.1f} on {cores} cores: other processes compete with the ranks"
        return ""

    def close(self) -> None:
        """Leave the registry."""
        _forget(self.entry)

    def __enter__(self) -> ThreadShare:
        return self

    def __exit__(self, *exception) -> None:
        self.close()  # also when the run fails: a caller that carries on (a test, a sweep) is no training rank
