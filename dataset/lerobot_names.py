"""What a fleet store's features and tasks are called in a LeRobotDataset export.

LeRobot has names of its own where ours differ: its Meta-World datasets (``lerobot/metaworld_mt50``)
and ``lerobot-eval --env.type=metaworld`` call the corner2 camera ``observation.image``, and a
frame's task is the task's instruction ("Pick and place a puck to a goal"), which lerobot-eval
hands a policy as ``observation["task"]``. LeRobot also owns the feature ``task_index`` (its own
index into the dataset's task strings), so a multi-task store's ``task_index`` goes out as
``fleet_task_index``. An export's sidecar records the renames, and an import renames back.
"""

from __future__ import annotations

from sim.metaworld_tasks import DESCRIPTIONS, FAMILY

TASK_INDEX = "task_index"  # the store's per-frame index into manifest["task"]["tasks"]
RENAMED = {TASK_INDEX: f"fleet_{TASK_INDEX}"}  # every store: our name -> its LeRobot name
METAWORLD_RENAMED = {"observation.images.corner2": "observation.image"}  # Meta-World stores, besides


def is_metaworld(task: str) -> bool:
    """Whether ``task`` (a task or group name) is Meta-World's."""
    return task.startswith(f"{FAMILY}/")


def lerobot_names(task: str, features: list[str]) -> dict[str, str]:
    """Our name -> LeRobot name for those of ``features`` that an export of a store of ``task`` (its
    task or group name) renames; every other feature keeps its name."""
    renamed = {**RENAMED, **(METAWORLD_RENAMED if is_metaworld(task) else {})}
    return {name: renamed[name] for name in features if name in renamed}


def lerobot_task(task: str) -> str:
    """The LeRobot task string of a frame of ``task``: a Meta-World task's instruction, else the name."""
    return DESCRIPTIONS[task.removeprefix(f"{FAMILY}/")] if is_metaworld(task) else task


def lerobot_tasks(task_block: dict) -> list[str]:
    """The LeRobot task string of each of a manifest's ``task`` block's tasks, indexed as the frames'
    ``task_index``: one entry for a single-task store."""
    return [lerobot_task(task) for task in task_block.get("tasks") or [task_block["name"]]]
