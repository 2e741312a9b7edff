"""Configs from the command line: each command's options are the fields of a config dataclass.

Each field of a config dataclass becomes a ``--field-name`` option with the field's
default, its type and the help text from ``field(metadata={"help": ...})``. Booleans
become ``--flag`` / ``--no-flag`` pairs; tuples take several values. A field with
``metadata={"positional": True}`` (and no default) is a positional argument instead.
A field whose type is itself a config dataclass groups options by concern (``TrainConfig.optim``):
its fields are options of their own, named as if they stood at the top (``--max-steps``), with
the defaults of the group's default instance; the names must stay unique across the groups.

Commands with subcommands (``dataset info PATH``) give each subcommand its own
config dataclass: see ``parse_subcommand``. The range and choice checks of a config's
``__post_init__`` (``check_options``, ``check_choices``) raise ``ValueError``, which the
parser turns into a one-line error.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Callable, Sequence, TypeVar

ConfigT = TypeVar("ConfigT")


def _with_default(help_text: str, default) -> str:
    """The help text with its default appended, unless the text already says what the default is."""
    return help_text if "(default" in help_text else f"{help_text} (default: {default})"


def _default(field: dataclasses.Field):
    """The field's default; None for one without (a positional argument)."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def _add_field(parser: argparse.ArgumentParser, field: dataclasses.Field, field_type, default) -> None:
    option = "--" + field.name.replace("_", "-")
    help_text = field.metadata.get("help", "").replace("%", "%%")  # argparse formats help with %
    if field.metadata.get("positional"):
        parser.add_argument(field.name, type=field_type, help=help_text)
        return
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


def _add_fields(parser: argparse.ArgumentParser, config_class: type, defaults: object | None = None) -> None:
    """An option per field of ``config_class`` (a group's fields in its place), defaults from ``defaults``
    (an instance) where given, else from the fields."""
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        default = getattr(defaults, field.name) if defaults is not None else _default(field)
        if dataclasses.is_dataclass(hints[field.name]):
            _add_fields(parser, hints[field.name], default)
        else:
            _add_field(parser, field, hints[field.name], default)


def _instance(config_class: type[ConfigT], arguments: dict) -> ConfigT:
    """``config_class`` from the parsed options, each group's built from its own fields."""
    hints = typing.get_type_hints(config_class)
    return config_class(**{
        field.name: _instance(hints[field.name], arguments) if dataclasses.is_dataclass(hints[field.name])
        else tuple(arguments[field.name]) if isinstance(arguments[field.name], list) else arguments[field.name]
        for field in dataclasses.fields(config_class)})


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
        return _instance(config_class, arguments)
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
