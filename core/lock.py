"""One writer per output: an exclusive lock on an output directory for the whole of a command's run.

    with output_lock(config.out, "collect"):
        ...  # no other RoboFleet command writes config.out meanwhile

The lock is ``fcntl.flock`` on the file ``.NAME.lock`` beside the directory NAME (``data/.fleet.lock``
for ``data/fleet``; ``lock_path``), not inside it: the directory may not exist yet, some commands
refuse an output that is not empty, and some build theirs aside and rename it into place (evaluate,
``dataset export-lerobot``). The folder it lies in is created if missing, as writing the output would.
The path is resolved first, so two spellings of one directory (relative, absolute, through a symlink)
share one lock.

The holder writes its pid, host, command and start time into the file, and a second writer is refused
with one line naming them (``core.errors.fail``, exit 2), before it has written anything. The kernel
releases a flock when its holder dies, ``kill -9`` included, so a lock file that a killed run left is
simply taken over; a run that ends, normally, on an error or on Ctrl-C, removes the file. The lock is as
good as ``flock`` on the filesystem: local disks and NFS honour it across processes and hosts.

Under torchrun only global rank 0 (``RANK``), the rank that writes, takes the lock: the other ranks of a
job take none and are never refused; a second job's rank 0 is refused, and its exit ends that job.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import check_output_directory, fail

_held: set[int] = set()  # the descriptors of the locks this process holds


def lock_path(directory: str | Path) -> Path:
    """The lock file of the output ``directory``: ``.NAME.lock`` beside it."""
    directory = Path(directory).resolve()
    return directory.with_name(f".{directory.name}.lock")


@contextmanager
def output_lock(directory: str | Path, command: str, name: str = "--out") -> Iterator[None]:
    """Hold ``directory``'s lock for the body, as ``command`` (its name in the refusal others get); where
    another process holds it, a one-line error naming that process (exit 2), and so where a file is in the
    way above ``directory`` (the option ``name`` gave it). See the module docstring."""
    if os.environ.get("RANK", "0") != "0":  # a torchrun rank other than 0: its rank 0 holds the lock
        yield
        return
    try:
        check_output_directory(directory, name, replaceable=True)  # the command refuses a file in its place
    except ValueError as error:
        fail(str(error))
    path = lock_path(directory)
    descriptor = _acquire(path, directory)
    try:
        record = {"command": command, "pid": os.getpid(), "host": socket.gethostname(),
                  "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(descriptor, 0)  # a killed holder's record may be there
        os.pwrite(descriptor, (json.dumps(record) + "\n").encode(), 0)
        yield
    finally:
        _release(path, descriptor)


def _acquire(path: Path, directory: str | Path) -> int:
    """The descriptor of ``path``, open and locked; ``fail`` where another process holds it."""
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            fail(f"cannot write to {directory}: {error.strerror}")
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(descriptor)
            os.close(descriptor)
            fail(f"{directory} is being written by {holder}; wait for it to finish or choose another output")
        except OSError as error:  # a filesystem without locks
            os.close(descriptor)
            fail(f"cannot lock {directory} ({path}): {error.strerror}")
        if _same_file(descriptor, path):
            _held.add(descriptor)
            return descriptor
        os.close(descriptor)  # its holder removed it as it ended, after this process opened it: lock the new one


def _holder(descriptor: int) -> str:
    """Who holds the lock of ``descriptor``, from the record in its file."""
    for _ in range(20):  # the holder writes its record just after it takes the lock
        try:
            record = json.loads(os.pread(descriptor, 4096, 0))
            return f"{record['command']} (pid {record['pid']} on host {record['host']}, since {record['since']})"
        except (ValueError, KeyError, TypeError):
            time.sleep(0.05)
    return "another process"


def _same_file(descriptor: int, path: Path) -> bool:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (opened.st_dev, opened.st_ino) == (found.st_dev, found.st_ino)


def _release(path: Path, descriptor: int) -> None:
    if descriptor not in _held:  # a forked child leaving the holder's block: the lock is not its own
        return
    _held.discard(descriptor)
    try:
        if _same_file(descriptor, path):
            path.unlink()  # while still locked: whoever opens the path next makes a new file
    finally:
        os.close(descriptor)


def _close_in_child() -> None:
    # A flock belongs to the open file, which a fork shares: a forked child (a DataLoader worker) that
    # outlived a killed holder would keep the lock. Closing the child's copy (never LOCK_UN, which would
    # free it for the holder too) leaves the lock to the holder alone.
    for descriptor in _held:
        os.close(descriptor)
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)
