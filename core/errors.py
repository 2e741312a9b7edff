"""One-line errors and warnings, the way every RoboFleet command reports bad input, output that a
reader may stop reading, and the crash points the tests kill a command at."""

from __future__ import annotations

import os
import signal
import sys
import typing
from pathlib import Path


class Failure(SystemExit):
    """How ``fail`` exits: the one-line error is printed; ``message`` keeps it for whoever records it."""

    def __init__(self, message: str, code: int):
        super().__init__(code)
        self.message = message


def check_output_directory(path: str | Path, name: str = "--out", replaceable: bool = False) -> None:
    """Refuse ``path`` as a directory to make where a file is in the way: ``path`` itself (unless
    ``replaceable``: the command replaces it) or a folder above it. Raises ``ValueError`` naming ``name``."""
    path = Path(path)
    for ancestor in (path, *path.parents):
        if ancestor.is_dir():
            return
        if ancestor.exists() and not (replaceable and ancestor == path):
            where = "is a file" if ancestor == path else f"lies under {ancestor}, which is a file"
            raise ValueError(f"{name} {path} {where}, not a directory")


def fail(message: str, code: int = 2) -> typing.NoReturn:
    """Exit with a one-line error, the way every RoboFleet command reports bad input."""
    _say(f"error: {message}")
    raise Failure(message, code)


def warn(message: str) -> None:
    """A one-line warning on stderr: something the command worked around, that the user should know."""
    _say(f"warning: {message}")


def _say(line: str) -> None:
    # One write of the whole line: print() writes the text and its newline apart, and unbuffered
    # stderr turns them into two writes that the other ranks of a torchrun job can land between.
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def quiet_closed_pipes() -> None:
    """Let this command outlive a reader that stops reading its stdout or stderr (``collect ... | head -1``):
    every command's ``main`` calls this first.

    The command carries on with its output going to /dev/null from the first write that finds the pipe
    closed, and exits as it would have: 0 when its work succeeded, never the 141 of a producer killed by
    SIGPIPE. A command's product is what it writes to disk, not what it prints: stopping at a reader's
    whim would leave a training without its last checkpoint (or, under torchrun, with its other ranks
    hung and the run restarted), a collection half-done, a ``verify`` without its verdict; and a script
    under ``set -o pipefail`` that glances at the first line still sees the command's own status. No
    BrokenPipeError traceback shows, nor Python's "Exception ignored" at exit."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _ReaderMayLeave):
            setattr(sys, name, _ReaderMayLeave(stream))


class _ReaderMayLeave:
    """A text stream whose reader may close it; it is otherwise the stream itself."""

    def __init__(self, stream: typing.TextIO):
        self._stream = stream

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        # The file descriptor, not just this object: the interpreter's flush at exit, and any code that
        # kept the stream from before, then write to /dev/null too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)
        self._stream.flush()  # what the closed pipe refused, to /dev/null


def shortened(text: str, limit: int = 200) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with ``...`` where it was cut
    (mid-word only where the word cut would be more than half of what is kept: a long path, say)."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 3]
    words = cut.rsplit(" ", 1)[0]
    return (words if len(words) >= len(cut) // 2 else cut).rstrip(" ,;:") + "..."


def one_line(error: BaseException, limit: int = 200) -> str:
    """An exception as one short line for a message or a record: ``"TypeName: first line of its text"``,
    ``shortened`` to ``limit``."""
    lines = str(error).strip().splitlines()
    return shortened(f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": "), limit)


CRASH_AT = "ROBOFLEET_CRASH_AT"  # a test hook: the step at which crash_point kills the process group


def crash_point(step: str) -> None:
    """Where ``$ROBOFLEET_CRASH_AT`` names ``step``, SIGKILL this process's group here, as ``kill -9`` of
    a command (its dask workers included) would: how tests reach each step of a protocol that must
    survive a crash (tests/collect/test_repair.py). Unset, it does nothing."""
    if os.environ.get(CRASH_AT) == step:
        os.killpg(os.getpgrp(), signal.SIGKILL)
