"""Many tasks in one evaluation: which task each robot runs, its episodes, and each task's difficulty group.

A multi-task policy (its checkpoint's task block lists ``"tasks"``) or the expert alone on a
group (``--task metaworld/mt10``) is evaluated on every task of the list. Each robot runs one
task, the one ``sim.fleet.fleet_task`` gives it, exactly as ``collect`` shared the group out,
and ``--episodes`` counts episodes per task (LeRobot's protocol: 10 per task), split as evenly
as possible over the robots that run it.
"""

from __future__ import annotations

from collections import defaultdict

from sim.fleet import fleet_task
from sim.metaworld_tasks import FAMILY, GROUPS, task_name

DIFFICULTIES = tuple(f"{FAMILY}/{level}" for level in ("easy", "medium", "hard", "very_hard"))  # LeRobot's groups
_DIFFICULTY = {task_name(task): group for group in DIFFICULTIES for task in GROUPS[group]}


def difficulty(task: str) -> str | None:
    """The difficulty group (``metaworld/easy`` ... ``metaworld/very_hard``) that lists ``task``; None for others."""
    return _DIFFICULTY.get(task)


def by_difficulty(tasks) -> list[str]:
    """``tasks`` easy to very_hard, by name within a group; tasks in no group after them, by name."""
    return sorted(tasks, key=lambda task: (DIFFICULTIES.index(group) if (group := difficulty(task)) else
                                           len(DIFFICULTIES), task))


def share_episodes(tasks: list[str], robot_ids: list[int], episodes: int) -> dict[int, tuple[str, int]]:
    """Robot id -> (its task, its number of episodes): each task's ``episodes`` split over the robots that run
    it, the lower ids taking one more where they do not divide. A one-line ``ValueError`` where a task has no
    robot or more robots than episodes."""
    runs: dict[str, list[int]] = defaultdict(list)
    for robot_id in robot_ids:
        runs[fleet_task(tasks, robot_id)].append(robot_id)
    span = f"robots {robot_ids[0]}..{robot_ids[-1]}"
    if missing := [task for task in tasks if task not in runs]:
        raise ValueError(f"{span} run no episode of {missing[0]} ({len(missing)} of the {len(tasks)} tasks have no "
                         f"robot; each robot runs one task, sim.fleet.fleet_task): evaluate more robots")
    if crowded := next((task for task, ids in runs.items() if len(ids) > episodes), None):
        raise ValueError(f"{span} put {len(runs[crowded])} robots on {crowded}, more than its --episodes {episodes} "
                         "(episodes per task with many tasks): evaluate fewer robots or more episodes")
    shares = {}
    for task, ids in runs.items():
        for rank, robot_id in enumerate(ids):
            shares[robot_id] = (task, episodes // len(ids) + (rank < episodes % len(ids)))
    return shares
