"""An experiment as a declaration: a short TOML file of its question, its claim and its stages.

    name = "reach_smoke"
    question = "does behaviour cloning learn reach from 2 robots?"
    claim = "the pipeline runs end to end"

    [[stage]]
    name = "collect"
    kind = "collect"
    options = { task = "reach", robots = 2, episodes = 2 }

    [[stage]]
    name = "train"
    kind = "train"
    processes = 2
    options = { data = "{collect}", policy = "mlp", hidden = [64, 64] }

    [[stage]]
    name = "test"
    kind = "evaluate"
    options = { checkpoint = "{train}", split = "test", robots = 1 }

    [[stage]]
    name = "compare"
    kind = "compare"
    options = { evaluations = ["test"] }

A stage's options are its command's options (``robots = 2`` is ``--robots 2``, ``true``/``false`` are
``--flag``/``--no-flag``, a list is the option's values one after another); ``"{collect}"`` in a value is the
output of the earlier stage ``collect``. A train stage with ``processes = N`` (N > 1) runs under ``torchrun
--standalone --nproc_per_node=N``, as a user trains with DDP on one machine. Every evaluate stage declares its ``split``, and a compare stage, whose
figures are the ones reported, reads only test evaluations. ``load_declaration`` refuses anything else in one line.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path

from experiments.lerobot_stages import KINDS as LEROBOT_KINDS
from experiments.lerobot_stages import check_stage

DECLARATION_KEYS = {"name", "question", "claim", "stage"}
STAGE_KEYS = {"name", "kind", "options", "processes"}
KINDS = ("collect", "train", "evaluate", "export", "lerobot-eval", "compare")  # the LeRobot two: lerobot_stages
RUNNER_OPTIONS = {"out", "ledger", "question"}  # the runner sets these: outputs go under WORK, tests in the ledger
COMPARE_OPTIONS = {"evaluations", "side_by_side"}
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class Stage:
    """One step of an experiment: its name (and output folder), its kind, its command's options, and (train
    stages) how many DDP processes run it."""
    name: str
    kind: str
    options: dict
    processes: int = 1

    @property
    def split(self) -> str | None:
        """The split an evaluate stage measures on; None for other kinds."""
        return self.options.get("split") if self.kind == "evaluate" else None


@dataclass(frozen=True)
class Declaration:
    """An experiment: the question it answers, the claim it backs, and its stages in the order they run."""
    name: str
    question: str
    claim: str
    stages: tuple[Stage, ...]


def load_declaration(path: str | Path) -> Declaration:
    """The declaration in the TOML file at ``path``, checked; a one-line ``ValueError`` where it is not one."""
    try:
        table = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: {str(error).splitlines()[0]}") from None
    try:
        return parse_declaration(table)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def parse_declaration(table: dict) -> Declaration:
    """A declaration from its parsed TOML ``table``, checked (see the module docstring)."""
    _check_keys(table, DECLARATION_KEYS, "the declaration")
    for key in ("name", "question", "claim"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise ValueError(f"the declaration needs a {key} (a non-empty string)")
    stages: list[Stage] = []
    for number, stage_table in enumerate(table.get("stage", []), start=1):
        stages.append(_parsed_stage(stage_table, number, stages))
    if not stages:
        raise ValueError("the declaration has no [[stage]]")
    if sum(stage.kind == "compare" for stage in stages) > 1:
        raise ValueError("the declaration has more than one compare stage; its one compare writes the results file")
    return Declaration(table["name"], table["question"], table["claim"], tuple(stages))


def option_names(kind: str) -> set[str]:
    """The options a stage of ``kind`` may set: its command's config fields (a group's fields as its own)."""
    from collect.config import CollectConfig
    from eval.config import EvalConfig
    from train.config import TrainConfig
    config_class = {"collect": CollectConfig, "train": TrainConfig, "evaluate": EvalConfig}[kind]
    return _field_names(config_class)


def _field_names(config_class: type) -> set[str]:
    hints = typing.get_type_hints(config_class)
    names = set()
    for field in dataclasses.fields(config_class):
        is_group = dataclasses.is_dataclass(hints[field.name])
        names |= _field_names(hints[field.name]) if is_group else {field.name}
    return names


def _check_keys(table: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ValueError(f"{where} has unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed))})")


def _parsed_stage(table: dict, number: int, earlier: list[Stage]) -> Stage:
    if not isinstance(table.get("name"), str) or not table["name"]:
        raise ValueError(f"stage {number} needs a name")
    name = table["name"]
    _check_keys(table, STAGE_KEYS, f"stage {name}")
    if name in {stage.name for stage in earlier}:
        raise ValueError(f"two stages are named {name}")
    if table.get("kind") not in KINDS:
        raise ValueError(f"stage {name} has kind {table.get('kind')!r}; a stage is one of {', '.join(KINDS)}")
    options = {key.replace("-", "_"): value for key, value in table.get("options", {}).items()}
    processes = table.get("processes", 1)
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise ValueError(f"stage {name} has processes = {processes!r}; it is a whole number, at least 1")
    if processes > 1 and table["kind"] != "train":
        raise ValueError(f"stage {name} has processes = {processes}; only a train stage runs under torchrun")
    stage = Stage(name, table["kind"], options, processes)
    _check_options(stage)
    _check_placeholders(stage, earlier)
    if stage.kind == "evaluate" and stage.split not in ("dev", "test"):
        raise ValueError(f"evaluate stage {name} must declare split = \"dev\" or \"test\"")
    if stage.kind == "compare":
        _check_compared(stage, earlier)
    return stage


def _check_options(stage: Stage) -> None:
    if stage.kind in LEROBOT_KINDS:
        check_stage(stage.name, stage.kind, stage.options)
        return
    known = COMPARE_OPTIONS if stage.kind == "compare" else option_names(stage.kind) - RUNNER_OPTIONS
    for option in stage.options:
        if option in RUNNER_OPTIONS and stage.kind != "compare":
            raise ValueError(f"stage {stage.name} sets {option}, which the runner sets (outputs go under --work; "
                             "test evaluations take the declaration's question and the runner's --ledger)")
        if option not in known:
            raise ValueError(f"stage {stage.name}: {stage.kind} has no option {option!r}")
        values = stage.options[option] if isinstance(stage.options[option], list) else [stage.options[option]]
        if not all(isinstance(value, (str, int, float)) for value in values):
            raise ValueError(f"stage {stage.name} option {option} is not a string, number, boolean or list of them")


def placeholders(value) -> list[str]:
    """The stage names that ``{NAME}`` placeholders in an option value (a string, or a list of them) refer to."""
    values = value if isinstance(value, list) else [value]
    return [name for item in values if isinstance(item, str) for name in PLACEHOLDER.findall(item)]


def _check_placeholders(stage: Stage, earlier: list[Stage]) -> None:
    names = {stage.name for stage in earlier}
    for option, value in stage.options.items():
        for name in placeholders(value):
            if name not in names:
                raise ValueError(f"stage {stage.name} option {option} refers to {{{name}}}, which is no earlier stage")


def _check_compared(stage: Stage, earlier: list[Stage]) -> None:
    evaluations = stage.options.get("evaluations")
    if not isinstance(evaluations, list) or not evaluations:
        raise ValueError(f"compare stage {stage.name} needs evaluations = [the evaluate stages it reports]")
    by_name = {stage.name: stage for stage in earlier}
    for name in evaluations:
        compared = by_name.get(name)
        if compared is None or compared.kind != "evaluate":
            raise ValueError(f"compare stage {stage.name} reads {name!r}, which is no earlier evaluate stage")
        if compared.split != "test":
            raise ValueError(f"compare stage {stage.name} reads {name}, a {compared.split} evaluation: reported figures "
                             "come from the test split only (choose on dev, report test)")
    pair = stage.options.get("side_by_side")
    if pair is not None and (not isinstance(pair, list) or len(pair) != 2 or pair[0] not in evaluations
                             or by_name.get(pair[1]) is None or by_name[pair[1]].kind != "lerobot-eval"):
        raise ValueError(f"compare stage {stage.name}: side_by_side is [one of its evaluations, a lerobot-eval stage]")
