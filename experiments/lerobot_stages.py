"""The runner's LeRobot stages: export a bc.py run, run ``lerobot-eval`` on Meta-World, set it beside ``evaluate``.

    [[stage]]
    name = "export"
    kind = "export"                      # python -m train.export {train} WORK/export
    options = { checkpoint = "{train}" }

    [[stage]]
    name = "lerobot_eval"
    kind = "lerobot-eval"                # lerobot-eval --env.type=metaworld ... --output_dir WORK/lerobot_eval
    options = { policy = "{export}", tasks = ["reach-v3", "push-v3"], episodes = 2, seed = 1000 }

A compare stage with ``side_by_side = ["test", "lerobot_eval"]`` (an evaluate stage, then a lerobot-eval stage)
writes each task's successes from both, with their 95% Wilson intervals, and whether they agree: the two
intervals overlap. lerobot-eval runs as a user runs it: one process for all the tasks (``--env.task`` lists
them), one environment at a time, on the CPU, its image renamed to the export's camera name
(``--rename_map``; our exports keep ``observation.images.corner2``, lerobot-eval's Meta-World env gives
``observation.image``). Its eval_info.json lists each task's episodes' successes (``per_task``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from dataset.lerobot_names import METAWORLD_RENAMED
from eval.report import wilson_interval

KINDS = ("export", "lerobot-eval")
OPTIONS = {"export": {"checkpoint"}, "lerobot-eval": {"policy", "tasks", "episodes", "seed"}}
REQUIRED = {"export": {"checkpoint"}, "lerobot-eval": {"policy", "tasks", "episodes"}}
RENAME_MAP = {lerobot: ours for ours, lerobot in METAWORLD_RENAMED.items()}  # lerobot-eval's name -> the export's


def lerobot_eval_executable() -> str:
    """The ``lerobot-eval`` beside this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "lerobot-eval"
    return str(beside) if beside.exists() else shutil.which("lerobot-eval") or "lerobot-eval"


def stage_command(kind: str, options: dict, out: str) -> list[str]:
    """The command of an export or lerobot-eval stage with ``options`` (placeholders resolved), writing ``out``."""
    if kind == "export":
        return [sys.executable, "-m", "train.export", options["checkpoint"], out]
    return [lerobot_eval_executable(), "--env.type=metaworld", f"--env.task={','.join(options['tasks'])}",
            f"--policy.path={options['policy']}", f"--eval.n_episodes={options['episodes']}",
            "--eval.batch_size=1", "--policy.device=cpu", f"--seed={options.get('seed', 1000)}",
            f"--rename_map={json.dumps(RENAME_MAP)}", f"--output_dir={out}"]


def check_stage(name: str, kind: str, options: dict) -> None:
    """Raise a one-line ValueError for an export or lerobot-eval stage's missing or unknown options."""
    unknown, missing = sorted(set(options) - OPTIONS[kind]), sorted(REQUIRED[kind] - set(options))
    if unknown:
        raise ValueError(f"stage {name}: {kind} has no option {unknown[0]!r} (known: {', '.join(sorted(OPTIONS[kind]))})")
    if missing:
        raise ValueError(f"stage {name}: {kind} needs the option {missing[0]!r}")
    if kind == "lerobot-eval" and not (isinstance(options["tasks"], list) and options["tasks"]):
        raise ValueError(f"stage {name}: tasks is a list of Meta-World tasks, e.g. [\"reach-v3\"]")


def _figures(successes: int, n: int) -> dict:
    return {"n_episodes": n, "n_success": successes, "pc_success": 100 * successes / n if n else None,
            "ci95": wilson_interval(successes, n)}


def lerobot_eval_per_task(folder: Path) -> dict[str, dict]:
    """Each task's figures (episodes, successes, success %, 95% Wilson interval) from lerobot-eval's
    ``folder/eval_info.json``; a task's name is its ``--env.task`` entry (e.g. ``reach-v3``)."""
    info = json.loads((folder / "eval_info.json").read_text())
    per_task = {}
    for entry in info["per_task"]:
        successes = [bool(success) for success in entry["metrics"]["successes"]]
        per_task[entry["task_group"]] = _figures(sum(successes), len(successes))
    return per_task


def evaluate_per_task(info: dict) -> dict[str, dict]:
    """Each task's figures from an evaluate eval_info.json, named as lerobot-eval names them (``reach-v3``)."""
    return {name.rsplit("/", 1)[-1]: _figures(summary["n_success"], summary["n_episodes"])
            for name, summary in info["per_task"].items()}


def intervals_overlap(first: list[float], second: list[float]) -> bool:
    """Whether two intervals [low, high] share a point."""
    return first[0] <= second[1] and second[0] <= first[1]


def side_by_side(evaluate_info: dict, lerobot_folder: Path) -> dict:
    """Per task that both measured: evaluate's and lerobot-eval's figures and ``agree`` (their 95% intervals
    overlap); ``all_agree`` over them, and the tasks only one of them measured."""
    ours, theirs = evaluate_per_task(evaluate_info), lerobot_eval_per_task(lerobot_folder)
    tasks = sorted(set(ours) & set(theirs))
    per_task = {task: {"evaluate": ours[task], "lerobot_eval": theirs[task],
                       "agree": intervals_overlap(ours[task]["ci95"], theirs[task]["ci95"])} for task in tasks}
    return {"per_task": per_task, "all_agree": all(row["agree"] for row in per_task.values()),
            "only_evaluate": sorted(set(ours) - set(theirs)), "only_lerobot_eval": sorted(set(theirs) - set(ours))}
