"""Errors that a restart cannot fix end a torchrun job after one attempt.

``torchrun --max-restarts=N`` restarts every rank after any failure, which is what a
killed rank or a lost host needs. A bad store, option or checkpoint fails the same way
on every attempt, though: N + 1 attempts, each with its error. So a training command
that stops with a one-line error under torchrun (``failures_remembered``) records that line
and a fingerprint of its inputs in ``RUN/.failed.json``; a restarted attempt that finds
the same inputs (``end_if_failed_before``, called before torch is imported) exits at once
and silently, since the first attempt has said why. The fingerprint is the command line,
the training collection's manifest (its size and time) and the checkpoint ``last`` points
at: where any of them has changed, the attempt runs. A fresh torchrun (attempt 0) forgets
the record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from core.errors import Failure
from core.files import write_json_atomic

RECORD = ".failed.json"


def _attempt() -> int | None:
    """This attempt's number under torchrun (0 first), or None outside it."""
    count = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    return int(count) if count is not None else None


def _paths(argv: list[str]) -> tuple[Path | None, Path | None]:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--data", type=Path)
    known, _ = parser.parse_known_args(argv)
    return known.out, known.data


def fingerprint(argv: list[str]) -> list:
    """What a deterministic failure depends on: the command line, the collection's manifest, the last checkpoint."""
    out, data = _paths(argv)
    manifest = data / "manifest.json" if data else None
    stat = manifest.stat() if manifest and manifest.is_file() else None
    last = out / "checkpoints" / "last" if out else None
    return [list(argv), [stat.st_size, stat.st_mtime_ns] if stat else None,
            os.readlink(last) if last and last.is_symlink() else None]


def remember_failure(argv: list[str], message: str) -> None:
    """Record, under torchrun, that this command line failed with ``message`` (one line)."""
    out, _ = _paths(argv)
    if _attempt() is None or out is None:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / RECORD, {"fingerprint": fingerprint(argv), "error": message})
    except OSError:  # an --out that cannot be written: then every attempt fails at once anyway
        pass


@contextlib.contextmanager
def failures_remembered(argv: list[str]) -> Iterator[None]:
    """Around a training command's work: a one-line failure (``core.errors.fail``) is remembered for
    torchrun's restarts (``remember_failure``) on its way out."""
    try:
        yield
    except Failure as failure:
        remember_failure(argv, failure.message)
        raise


def end_if_failed_before(argv: list[str]) -> None:
    """On a restarted torchrun attempt, exit (code 2, silently) where the same inputs have failed before;
    on a first attempt, forget any earlier record."""
    out, _ = _paths(argv)
    attempt = _attempt()
    if attempt is None or out is None or not (out / RECORD).is_file():
        return
    if attempt == 0:
        (out / RECORD).unlink(missing_ok=True)
        return
    try:
        record = json.loads((out / RECORD).read_text())
    except ValueError:
        return
    if record.get("fingerprint") == json.loads(json.dumps(fingerprint(argv))):
        raise SystemExit(2)
