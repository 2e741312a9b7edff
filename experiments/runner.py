"""Run an experiment declared in TOML (experiments/declaration.py), and check the results files it writes.

    python -m experiments.runner run experiments/declarations/reach_smoke.toml
    python -m experiments.runner check experiments/results/reach_smoke.json

``run`` runs the stages in order, each as the command a user would type (``python -m collect.cli``,
``python train/bc.py``, ``python -m eval.cli``; ``python -m train.export`` and ``lerobot-eval`` for the LeRobot
stages, experiments/lerobot_stages.py) with its output in WORK/STAGE (``--work``, default
runs/experiments/NAME) and its stdout and stderr in WORK/logs/STAGE.log. Test evaluations take the declaration's
question and the ledger ``--ledger``. A compare stage is the runner's own: it writes the results file
(``--results``, default experiments/results/NAME.json; experiments/results_file.py), with evaluate and
lerobot-eval per task side by side where it names them (``side_by_side``).

A finished stage leaves WORK/records/STAGE.json: its command line, return code, start and end times and the
digest of its definition. A rerun skips the finished stages whose definition did not change and runs again from
the first changed or unfinished one (compare always runs: it only reads files). A failing stage stops the run
with one line naming it and its log.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from core.errors import fail
from core.files import REPO, repo_relative, write_json_atomic
from core.lock import output_lock
from core.options import OneLineErrorParser
from experiments.declaration import PLACEHOLDER, Declaration, Stage, load_declaration
from experiments.lerobot_stages import KINDS as LEROBOT_KINDS
from experiments.lerobot_stages import side_by_side
from experiments.lerobot_stages import stage_command as lerobot_stage_command
from experiments.results_file import check_results, compared_results, write_results

COMMANDS = {"collect": ["-m", "collect.cli"], "train": ["train/bc.py"], "evaluate": ["-m", "eval.cli"]}
DEFAULT_LEDGER = "experiments/results/test_ledger.jsonl"


def option_arguments(options: dict, outputs: dict[str, str]) -> list[str]:
    """A stage's ``options`` as command-line arguments, ``{STAGE}`` placeholders replaced by ``outputs[STAGE]``:
    ``robots = 2`` is ``--robots 2``, ``true``/``false`` are ``--flag``/``--no-flag``, a list gives its values."""
    arguments = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            arguments.append(flag if value else "--no-" + flag[2:])
        else:
            values = value if isinstance(value, list) else [value]
            arguments += [flag, *(_resolved(str(item), outputs) for item in values)]
    return arguments


def _resolved(value: str, outputs: dict[str, str]) -> str:
    return PLACEHOLDER.sub(lambda match: outputs[match.group(1)], value)


def stage_command(stage: Stage, outputs: dict[str, str], question: str, ledger: str) -> list[str]:
    """The command (argv, this interpreter first) that runs ``stage`` into ``outputs[stage.name]``: a train stage of
    several ``processes`` under torchrun (``python -m torch.distributed.run``, torchrun itself); an export or
    lerobot-eval stage as experiments/lerobot_stages.py builds it."""
    if stage.kind in LEROBOT_KINDS:
        resolved = {name: [_resolved(str(item), outputs) for item in value] if isinstance(value, list)
                    else _resolved(str(value), outputs) for name, value in stage.options.items()}
        return lerobot_stage_command(stage.kind, resolved, outputs[stage.name])
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={stage.processes}"] \
        if stage.processes > 1 else []
    command = [sys.executable, *launcher, *COMMANDS[stage.kind], *option_arguments(stage.options, outputs),
               "--out", outputs[stage.name]]
    if stage.split == "test":
        command += ["--ledger", ledger, "--question", question]
    return command


def shown_command(command: list[str]) -> str:
    """``command`` as a user types it: ``python ...``, or ``torchrun ...`` for ``python -m torch.distributed.run``."""
    launcher = ["-m", "torch.distributed.run"]
    if not Path(command[0]).name.startswith("python"):  # an executable of its own (lerobot-eval)
        return shlex.join([Path(command[0]).name, *command[1:]])
    shown = ["torchrun", *command[3:]] if command[1:3] == launcher else ["python", *command[1:]]
    return shlex.join(shown)


def definition_sha256(stage: Stage, question: str) -> str:
    """The digest of what a stage measures: its name, kind and options (a test evaluation's question too)."""
    definition = {"name": stage.name, "kind": stage.kind, "options": stage.options,
                  **({"processes": stage.processes} if stage.processes > 1 else {}),
                  **({"question": question} if stage.split == "test" else {})}
    return hashlib.sha256(json.dumps(definition, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def first_to_run(declaration: Declaration, records: Path) -> int:
    """The index of the first stage that is unfinished, failed, or changed since its record (compare stages,
    which always run, aside); past the last stage when every one finished unchanged."""
    for index, stage in enumerate(declaration.stages):
        if stage.kind == "compare":
            continue
        record = _record(records, stage.name)
        if (record is None or record["returncode"] != 0
                or record["definition_sha256"] != definition_sha256(stage, declaration.question)):
            return index
    return len(declaration.stages)


def _record(records: Path, name: str) -> dict | None:
    path = records / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def run_declaration(declaration: Declaration, declaration_path: Path, work: Path, results: Path,
                    ledger: Path) -> dict | None:
    """Run ``declaration`` (read from ``declaration_path``) in ``work`` (see the module docstring); the results
    it wrote (None without a compare stage)."""
    records, logs = work / "records", work / "logs"
    outputs = {stage.name: repo_relative(work / stage.name) for stage in declaration.stages}
    with output_lock(work, "python -m experiments.runner run", name="--work"):
        start = first_to_run(declaration, records)
        for stage in declaration.stages[start:]:  # from here on every stage runs: their inputs may have changed
            (records / f"{stage.name}.json").unlink(missing_ok=True)
        written = None
        for index, stage in enumerate(declaration.stages):
            if stage.kind == "compare":
                written = _compare(declaration, declaration_path, stage, outputs, records, results)
            elif index < start:
                print(f"{stage.name}: finished before, skipped")
            else:
                command = stage_command(stage, outputs, declaration.question, repo_relative(ledger))
                _run_stage(stage, command, REPO / outputs[stage.name], records, logs, declaration.question)
    return written


def _run_stage(stage: Stage, command: list[str], out: Path, records: Path, logs: Path, question: str) -> None:
    """Run one stage's command into a fresh ``out``, its output in its log; record it; a failure ends the run."""
    shutil.rmtree(out, ignore_errors=True)  # a rerun starts over: a half-made or stale output is not resumed
    log = logs / f"{stage.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    # as experiments.common.run_step; lerobot-eval's Meta-World env renders headless as our envs do (sim/__init__.py)
    env = {"MUJOCO_GL": "egl", **os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    with open(log, "w") as output:
        returncode = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=REPO).returncode
    _write_record(records, stage, question, shown_command(command), returncode, started)
    if returncode != 0:
        fail(f"stage {stage.name} failed (exit {returncode}); its output is in {log}", code=1)
    print(f"{stage.name}: done in {time.time() - started:.0f} s")


def _write_record(records: Path, stage: Stage, question: str, command: str, returncode: int, started: float) -> None:
    records.mkdir(parents=True, exist_ok=True)
    write_json_atomic(records / f"{stage.name}.json", {
        "stage": stage.name, "kind": stage.kind, "command": command, "returncode": returncode,
        "started": _timestamp(started), "ended": _timestamp(time.time()),
        "definition_sha256": definition_sha256(stage, question)})


def _timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def _compare(declaration: Declaration, declaration_path: Path, stage: Stage, outputs: dict[str, str],
             records: Path, results_path: Path) -> dict:
    """Write the results file from the test evaluations ``stage`` names; record the stage."""
    started = time.time()
    commands = {earlier.name: _record(records, earlier.name)["command"]
                for earlier in declaration.stages if earlier.kind != "compare"}
    evaluations = {name: REPO / outputs[name] for name in stage.options["evaluations"]}
    pair = stage.options.get("side_by_side")
    compared = side_by_side(json.loads((evaluations[pair[0]] / "eval_info.json").read_text()),
                            REPO / outputs[pair[1]]) if pair else None
    results = compared_results(declaration, declaration_path, evaluations, commands, compared)
    write_results(results_path, results)
    command = f"compare {' '.join(stage.options['evaluations'])} -> {repo_relative(results_path)}"
    _write_record(records, stage, declaration.question, command, 0, started)
    print(f"{stage.name}: wrote {repo_relative(results_path)}")
    return results


def _parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="python -m experiments.runner", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="run a declaration's stages, resuming where they finished")
    run.add_argument("declaration", type=Path, help="the experiment's TOML declaration")
    run.add_argument("--work", type=Path, help="where the stages' outputs, logs and records go "
                                               "(default: runs/experiments/NAME)")
    run.add_argument("--results", type=Path, help="the results file (default: experiments/results/NAME.json)")
    run.add_argument("--ledger", type=Path, default=REPO / DEFAULT_LEDGER,
                     help=f"the ledger of test evaluations (default: {DEFAULT_LEDGER})")
    check = commands.add_parser("check", help="check results files against their payload digests")
    check.add_argument("files", type=Path, nargs="+", help="results files")
    return parser


def main(argv: list[str] | None = None) -> None:
    """``run`` a declaration or ``check`` results files; one-line errors (exit 2 for a bad declaration,
    1 for a failed stage or a results file that does not match its digest)."""
    arguments = _parser().parse_args(argv)
    if arguments.command == "check":
        for path in arguments.files:
            try:
                check_results(path)
            except ValueError as error:
                fail(str(error), code=1)
            print(f"{path}: matches its payload digest")
        return
    try:
        declaration = load_declaration(arguments.declaration)
    except ValueError as error:
        fail(str(error))
    work = (arguments.work or REPO / "runs" / "experiments" / declaration.name).resolve()
    results = (arguments.results or REPO / "experiments" / "results" / f"{declaration.name}.json").resolve()
    run_declaration(declaration, arguments.declaration, work, results, arguments.ledger.resolve())


if __name__ == "__main__":
    main()
