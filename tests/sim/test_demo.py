"""The sim demo command and the shared config parser."""

import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from core.options import parse_config


def _demo(*arguments):
    return subprocess.run([sys.executable, "-m", "sim.demo", *arguments], capture_output=True, text=True)


def test_demo_prints_success_per_robot_and_per_site():
    completed = _demo("--robots", "3", "--episodes", "1", "--tasks", "reach", "--quiet")
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert "reach: success per robot" in out and "reach: success per site" in out
    for site in ("office", "warehouse", "factory", "fleet"):
        assert site in out


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--robots", "0"], "--robots and --episodes must be at least 1"),
        (["--tasks", "fly"], "unknown task 'fly'"),
        (["--episodes", "many"], "invalid int value"),
    ],
)
def test_demo_rejects_bad_input_with_one_line(arguments, message):
    completed = _demo(*arguments, "--quiet")
    assert completed.returncode != 0
    assert message in completed.stderr
    assert "Traceback" not in completed.stderr


@dataclass
class ExampleConfig:
    name: str = field(default="fleet", metadata={"help": "a name"})
    robots: int = 4
    rate: float | None = None
    cameras: tuple[str, ...] = ()
    overwrite: bool = False


@dataclass
class Group:
    steps: int = field(default=10, metadata={"help": "steps"})


@dataclass
class GroupedConfig:
    name: str = "fleet"
    group: Group = field(default_factory=Group)


@dataclass
class SmallerGroupConfig(GroupedConfig):
    group: Group = field(default_factory=lambda: Group(steps=3))


def test_a_group_of_options_keeps_flat_names_and_its_default_instance():
    assert parse_config(GroupedConfig, "", ["--steps", "7"]) == GroupedConfig(group=Group(steps=7))
    assert parse_config(SmallerGroupConfig, "", []).group == Group(steps=3)


def test_config_parser_maps_every_field_to_an_option():
    config = parse_config(ExampleConfig, "", ["--robots", "7", "--cameras", "front", "wrist", "--overwrite", "--rate", "0.5"])
    assert config == ExampleConfig(name="fleet", robots=7, rate=0.5, cameras=("front", "wrist"), overwrite=True)
    assert parse_config(ExampleConfig, "", []) == ExampleConfig()
