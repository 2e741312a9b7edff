"""Dataclass configs with command-line overrides, shared by every stage's commands.

Each field of a config dataclass becomes a ``--field-name`` option with the field's
default, its type and the help text from ``field(metadata={"help": ...})``. Booleans
become ``--flag`` / ``--no-flag`` pairs; tuples take several values.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.metadata
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import TypeVar

ConfigT = TypeVar("ConfigT")


def _add_field(parser: argparse.ArgumentParser, field: dataclasses.Field, field_type) -> None:
    option = "--" + field.name.replace("_", "-")
    help_text = field.metadata.get("help", "")
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
    origin = typing.get_origin(field_type)
    if field_type is bool:
        parser.add_argument(option, action=argparse.BooleanOptionalAction, default=default, help=help_text)
    elif origin is tuple:
        item_type = typing.get_args(field_type)[0]
        parser.add_argument(option, nargs="*", type=item_type, default=default, help=f"{help_text} (default: {default})")
    else:
        if origin in (typing.Union, types.UnionType):  # Optional[X] / X | None
            field_type = next(arg for arg in typing.get_args(field_type) if arg is not type(None))
        parser.add_argument(option, type=field_type, default=default, help=f"{help_text} (default: {default})")


def config_parser(config_class: type, description: str) -> argparse.ArgumentParser:
    """An argparse parser with one option per field of ``config_class``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        _add_field(parser, field, hints[field.name])
    return parser


def parse_config(config_class: type[ConfigT], description: str, argv: list[str] | None = None) -> ConfigT:
    """Parse ``argv`` into an instance of ``config_class``; bad values exit with a one-line error."""
    parser = config_parser(config_class, description)
    arguments = vars(parser.parse_args(argv))
    try:
        config = config_class(**{name: tuple(v) if isinstance(v, list) else v for name, v in arguments.items()})
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    return config


def fail(message: str, code: int = 2) -> typing.NoReturn:
    """Exit with a one-line error, the way every RoboFleet command reports bad input."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """Package version plus git commit (``-dirty`` for local edits), e.g. ``0.1.0+3f2a9c1d07e4``."""
    try:
        version = importlib.metadata.version("robofleet")
    except importlib.metadata.PackageNotFoundError:
        version = "0+unknown"
    repo = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version
    return f"{version}+{commit}" if commit else version
