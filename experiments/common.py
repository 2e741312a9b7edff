"""What the experiments share: running a stage as a user does, putting a table into a doc, and
keeping a results file's recorded rows beside a new run's."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path
from typing import Callable, TypeVar

from core.errors import fail
from core.files import REPO

T = TypeVar("T")


def run_step(name: str, command: list[str], log: Path, env: dict[str, str] | None = None) -> float:
    """Run one stage as users do (a subprocess, with ``env`` added to the environment), its output
    in ``log``; the seconds it took.

    A stage that fails ends the experiment with a one-line error naming its log.
    """
    started = time.perf_counter()
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", **(env or {})}  # torchrun restarts hang without it
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as output:
        code = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=REPO).returncode
    if code != 0:
        fail(f"{name} failed (exit {code}); its output is in {log}", code=1)
    seconds = time.perf_counter() - started
    print(f"{name}: done in {seconds:.0f} s")
    return seconds


def milliseconds(*seconds: float) -> str:
    """Durations in seconds as one string of milliseconds: ``"1.20 / 3.40 ms"``."""
    return " / ".join(f"{value * 1e3:.2f}" for value in seconds) + " ms"


def recorded_config(cls: type[T], recorded: dict, **replaced) -> T:
    """The options dataclass ``cls`` as a results file recorded it (lists as tuples; options since added take their
    defaults, options since removed are dropped), with ``replaced`` in place of some."""
    names = {option.name for option in dataclasses.fields(cls)}
    options = {key: tuple(value) if isinstance(value, list) else value for key, value in recorded.items() if key in names}
    return cls(**{**options, **replaced})


def doc_link(target: str, doc: str) -> str:
    """The link from the doc ``doc`` to the file ``target`` (each absolute, or relative to the repository)."""
    return os.path.relpath(REPO / target, (REPO / doc).parent)


def markers(name: str) -> tuple[str, str]:
    """The comments that open and close section ``name`` in a doc."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def replaced_section(document: str, name: str, text: str, inline: bool = False) -> str:
    """``document`` with ``text`` between section ``name``'s markers (on lines of its own unless ``inline``).

    A ``ValueError`` (one line) where the markers are missing, doubled or out of order."""
    start, end = markers(name)
    counts = document.count(start), document.count(end)
    if counts != (1, 1) or document.index(start) > document.index(end):
        problem = "missing" if 0 in counts else "doubled" if max(counts) > 1 else "out of order"
        raise ValueError(f"the markers of section {name} are {problem} ({start} {counts[0]}, {end} {counts[1]})")
    before, rest = document.split(start, 1)
    body = text if inline else f"\n{text}\n"
    return f"{before}{start}{body}{end}{rest.split(end, 1)[1]}"


def write_section(path: Path, name: str, heading: str, text: str) -> None:
    """Put ``text`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``, replacing what was there.

    The first time, the markers are appended under ``heading`` (and the file is created).
    """
    start, end = markers(name)
    document = path.read_text() if path.exists() else ""
    if start not in document and end not in document:
        document = document.rstrip("\n") + f"\n\n{heading}\n\n{start}\n{end}\n"
    try:
        document = replaced_section(document, name, text)
    except ValueError as error:
        fail(f"{path}: {error}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document)


def merged_rows(recorded: dict | None, rows: list[dict], key: Callable[[dict], object], name: str) -> list[dict]:
    """The ``name`` rows of a ``recorded`` results file with each of this run's ``rows`` in place of its twin
    (the same ``key``), the new ones after them: rerunning part of an experiment keeps the rest of its figures.
    Every row says what measured it (``measured``: the machine facts and the command); recorded rows from
    before rows carried their own take the file's."""
    merged = []
    for row in (recorded or {}).get(name, []):
        merged.append({**row, "measured": row.get("measured", {**recorded["machine"], "command": recorded["command"]})})
    for row in rows:
        twin = next((i for i, old in enumerate(merged) if key(old) == key(row)), None)
        if twin is None:
            merged.append(row)
        else:
            merged[twin] = row
    return merged
