"""One-line errors and warnings, the way every RoboFleet command reports bad input, and the
crash points the tests kill a command at."""

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
