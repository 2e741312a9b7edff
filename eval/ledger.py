"""The test ledger: one line for every evaluation on the test split.

A figure reported from the test split means what it says only if the test split was not
used to choose it. The ledger makes that countable: ``evaluate --split test`` appends one
JSON line per evaluation to ``--ledger`` (default ``runs/test_ledger.jsonl``):

    {"time", "question", "checkpoint_sha256", "store_manifest_sha256", "task", "config",
     "code_version", "robots", "episodes", "pc_success", "out", "test_evaluations"}

``question`` names what the evaluation answers (``--question``; by default the checkpoint's
weights digest and the task), and ``test_evaluations`` counts the ledger's lines for that
question, this one included: the number a reported figure states beside itself. The line
is written before the evaluation is published, under an exclusive lock on the ledger, so
concurrent evaluations each add exactly one line, and a failed publish can only overcount.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from core.files import code_version

MAX_LEDGER = 256 * 2**20  # bytes: about a million lines, far beyond any project's test evaluations


def default_question(checkpoint_sha256: str | None, task: str) -> str:
    """The question of an evaluation that names none: this policy (or the expert) on this task."""
    return f"{'checkpoint ' + checkpoint_sha256[:16] if checkpoint_sha256 else 'expert'} on {task}"


def entries(ledger: Path) -> list[dict]:
    """The ledger's lines, oldest first; none where there is no ledger. A damaged one is a one-line ValueError."""
    if not ledger.exists():
        return []
    if ledger.stat().st_size > MAX_LEDGER:
        raise ValueError(f"the test ledger {ledger} is larger than {MAX_LEDGER // 2**20} MiB; it is not a ledger")
    lines = ledger.read_text().splitlines()
    try:
        return [json.loads(line) for line in lines if line.strip()]
    except ValueError as error:
        raise ValueError(f"the test ledger {ledger} is damaged ({error}); restore it from version control") from None


def record(ledger: Path, entry: dict) -> int:
    """Append ``entry`` (with the time, the code version and its question's count) to ``ledger``; the
    number of test evaluations of its question, this one included."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with open(ledger, "a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes
        count = 1 + sum(line.get("question") == entry["question"] for line in entries(ledger))
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "code_version": code_version(), **entry,
                "test_evaluations": count}
        file.write(json.dumps(line, sort_keys=True) + "\n")
        file.flush()
        os.fsync(file.fileno())
    return count

