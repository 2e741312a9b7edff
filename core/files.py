"""What outputs record and how they write it: the code version, repository-relative paths, atomic JSON."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent  # the repository root (the package is installed in place)


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """Package version plus git commit (``-dirty`` for local edits), e.g. ``0.1.0+3f2a9c1d07e4``."""
    try:
        version = importlib.metadata.version("robofleet")
    except importlib.metadata.PackageNotFoundError:
        version = "0+unknown"
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version
    return f"{version}+{commit}" if commit else version


def repo_relative(path: Path | str) -> str:
    """``path`` relative to the repository when it lies inside it (as outputs record paths), else as given."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def from_repo(path: Path | str) -> Path:
    """A path an output recorded: relative ones are relative to the repository (``repo_relative``)."""
    return Path(os.path.normpath(REPO / path))


def write_json_atomic(path: Path, content: dict) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(handle, "w") as file:
        json.dump(content, file, indent=2)
        file.write("\n")
    os.replace(temporary, path)


def file_sha256(path: Path) -> str:
    """The sha256 of the file at ``path``, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()
