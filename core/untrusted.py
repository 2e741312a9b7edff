"""Reading files a user hands us (checkpoints and their descriptions): regular files only, only
inside the directory they belong to, and never more bytes than expected.

Unchecked, a symlink to ``/dev/zero`` is read until memory runs out, a FIFO blocks its reader
for ever, and a link out of a run reads whatever file it names. Here each of them is refused
in one line before a byte is read: the file's type and size come from ``stat`` (a FIFO, device
or socket is never opened), and the read itself stops one byte past the size expected.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

KINDS = {stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a device", stat.S_ISBLK: "a device", stat.S_ISSOCK: "a socket",
         stat.S_ISDIR: "a directory"}


def memory_bytes() -> int:
    """This machine's physical memory, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_cap() -> int:
    """The most bytes a file whose size nothing records may hold: a quarter of this machine's memory."""
    return memory_bytes() // 4


def _kind(mode: int) -> str:
    return next((name for test, name in KINDS.items() if test(mode)), "not a regular file")


def read_untrusted(path: Path, root: Path, size: int | None = None, cap: int | None = None) -> bytes:
    """The bytes of ``path``, a regular file inside ``root`` (a symlink is followed only where its
    target stays inside ``root``), of exactly ``size`` bytes where given, and never more than ``cap``
    (default ``default_cap()``). Anything else is a one-line ``ValueError``, raised before reading."""
    path = Path(path)
    cap = default_cap() if cap is None else cap
    target = path.resolve()
    if not target.is_relative_to(Path(root).resolve()):
        raise ValueError(f"{path} links to {target}, outside {root}: refused")
    try:
        mode = os.stat(target).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path} is {_kind(mode)}, not a regular file: refused")
        # O_NONBLOCK: should a FIFO replace the file after the stat, opening it still returns at once
        handle = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    with os.fdopen(handle, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is {_kind(info.st_mode)}, not a regular file: refused")
        if size is not None and info.st_size != size:
            raise ValueError(f"{path} is damaged: it holds {info.st_size:,} bytes, not the {size:,} recorded")
        if info.st_size > cap:
            raise ValueError(f"{path} holds {info.st_size:,} bytes, more than the {cap:,} such a file may: refused")
        limit = cap if size is None else size
        data = file.read(limit + 1)
    if len(data) > limit or (size is not None and len(data) != size):
        raise ValueError(f"{path} changed while it was read: refused")
    return data
