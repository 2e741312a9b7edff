"""The helpers every stage's commands share: configs from the command line, one-line errors and
warnings, progress bars, the code version, atomic JSON files.

It lives in sim/, the bottom layer, so that every later stage (collect, dataset, train,
eval) and the benchmarks and experiments can import it.

Each field of a config dataclass becomes a ``--field-name`` option with the field's
default, its type and the help text from ``field(metadata={"help": ...})``. Booleans
become ``--flag`` / ``--no-flag`` pairs; tuples take several values. A field with
``metadata={"positional": True}`` (and no default) is a positional argument instead.

Commands with subcommands (``dataset info PATH``) give each subcommand its own
config dataclass: see ``parse_subcommand``. The commands' progress bars come from
``progress_bar``, their one-line errors from ``fail`` (and warnings from ``warn``); the
files they rewrite in place (manifests, config.json, caches) are written by
``write_json_atomic``; ``code_version`` is what they record as the code that ran, and ``repo_relative`` how
they record paths.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from tqdm import tqdm

ConfigT = TypeVar("ConfigT")
REPO = Path(__file__).resolve().parent.parent  # the repository root (the package is installed in place)


def _with_default(help_text: str, default) -> str:
    """The help text with its default appended, unless the text already says what the default is."""
    return help_text if "(default" in help_text else f"{help_text} (default: {default})"


def _add_field(parser: argparse.ArgumentParser, field: dataclasses.Field, field_type) -> None:
    option = "--" + field.name.replace("_", "-")
    help_text = field.metadata.get("help", "").replace("%", "%%")  # argparse formats help with %
    if field.metadata.get("positional"):
        parser.add_argument(field.name, type=field_type, help=help_text)
        return
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
    origin = typing.get_origin(field_type)
    if field_type is bool:
        parser.add_argument(option, action=argparse.BooleanOptionalAction, default=default, help=help_text)
    elif origin is tuple:
        item_type = typing.get_args(field_type)[0]
        parser.add_argument(option, nargs="*", type=item_type, default=default, help=_with_default(help_text, default))
    else:
        if origin in (typing.Union, types.UnionType):  # Optional[X] / X | None
            field_type = next(arg for arg in typing.get_args(field_type) if arg is not type(None))
        parser.add_argument(option, type=field_type, default=default, help=_with_default(help_text, default))


def _add_fields(parser: argparse.ArgumentParser, config_class: type) -> None:
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        _add_field(parser, field, hints[field.name])


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse's parser, reporting a bad command line in one line (argparse prints its usage first)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def config_parser(config_class: type, description: str) -> argparse.ArgumentParser:
    """An argparse parser with one option per field of ``config_class``."""
    parser = OneLineErrorParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_fields(parser, config_class)
    return parser


def _build_config(parser: argparse.ArgumentParser, config_class: type[ConfigT], arguments: dict) -> ConfigT:
    try:
        return config_class(**{name: tuple(v) if isinstance(v, list) else v for name, v in arguments.items()})
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")


def parse_config(config_class: type[ConfigT], description: str, argv: list[str] | None = None) -> ConfigT:
    """Parse ``argv`` into an instance of ``config_class``; bad values exit with a one-line error."""
    parser = config_parser(config_class, description)
    return _build_config(parser, config_class, vars(parser.parse_args(argv)))


def parse_subcommand(commands: dict[str, type], description: str, argv: list[str] | None = None) -> tuple[str, object]:
    """Parse ``COMMAND [options]``; ``commands`` maps each name to its config dataclass.

    Returns the command name and its config. Each config class's docstring is the
    subcommand's help.
    """
    parser = OneLineErrorParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, config_class in commands.items():
        summary = (config_class.__doc__ or "").strip().splitlines()[0]
        _add_fields(subparsers.add_parser(name, help=summary, description=config_class.__doc__), config_class)
    arguments = vars(parser.parse_args(argv))
    command = arguments.pop("command")
    return command, _build_config(parser, commands[command], arguments)


def check_options(config: object, names: Sequence[str], holds: Callable[[Any], bool], requirement: str) -> None:
    """The configs' range checks: for the first field of ``names`` whose value fails ``holds``,
    raise ``ValueError("--field-name {requirement}, got {value}")``."""
    for name in names:
        value = getattr(config, name)
        if not holds(value):
            raise ValueError(f"--{name.replace('_', '-')} {requirement}, got {value}")


def check_choices(config: object, choices: dict[str, Sequence[str]]) -> None:
    """The configs' choice checks: for the first field whose value is not among its ``choices``, raise
    ``ValueError("--field-name must be one of a, b, got 'value'")`` (an allowed ``""`` goes unnamed)."""
    for name, allowed in choices.items():
        value = getattr(config, name)
        if value not in allowed:
            raise ValueError(f"--{name.replace('_', '-')} must be one of {', '.join(filter(None, allowed))}, "
                             f"got {value!r}")


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
    print(f"error: {message}", file=sys.stderr)
    raise Failure(message, code)


def warn(message: str) -> None:
    """A one-line warning on stderr: something the command worked around, that the user should know."""
    print(f"warning: {message}", file=sys.stderr)


CRASH_AT = "ROBOFLEET_CRASH_AT"  # a test hook: the step at which crash_point kills the process group


def crash_point(step: str) -> None:
    """Where ``$ROBOFLEET_CRASH_AT`` names ``step``, SIGKILL this process's group here, as ``kill -9`` of
    a command (its dask workers included) would: how tests reach each step of a protocol that must
    survive a crash (tests/test_repair.py). Unset, it does nothing."""
    if os.environ.get(CRASH_AT) == step:
        os.killpg(os.getpgrp(), signal.SIGKILL)


LOG_REDRAW_S = 60.0  # a progress bar's redraw interval when stderr is a file or a pipe


def progress_bar(**options) -> tqdm:
    """A tqdm bar (``options`` are tqdm's) that redraws up to ten times a second on a terminal and once
    a minute when stderr is a file or a pipe, where every redraw is one more copy of the bar in the log."""
    redraw_s = 0.1 if sys.stderr.isatty() else LOG_REDRAW_S
    # maxinterval: tqdm's monitor thread would otherwise redraw a slow bar every 10 s
    return tqdm(mininterval=redraw_s, maxinterval=max(redraw_s, 10.0), **options)


def one_line(error: BaseException, limit: int = 200) -> str:
    """An exception as one short line for a message or a record: ``"TypeName: first line of its text"``."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")[:limit]


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
