"""Tasks: what collection and evaluation need to run a robot on something.

A task is three things (``TaskSpec``): a gymnasium env id, a factory that builds the
scripted expert for a robot profile, and a function from a profile to the env's
keyword arguments. The built-in tasks are registered here; outside tasks come in
without editing this package, in either of two ways:

- an entry point in the group ``robofleet.tasks`` whose object is a ``TaskSpec``
  (the entry point's name becomes the task name), or
- a ``module:attr`` reference to a ``TaskSpec``, accepted wherever the user names a task.

Wherever the user names a task, ``resolve_task`` accepts a short name (``pick_place``),
a registered env id (``robofleet/PickPlace-v0``), a Meta-World task (``metaworld/pick-place-v3``,
sim/metaworld_tasks.py), an entry-point name, or a ``module:attr`` reference. Where a command
takes many tasks, ``resolve_tasks`` also accepts a group (``TASK_GROUPS``): ``robofleet/all`` (the four
built-in tasks) or a Meta-World group (``metaworld/mt10``, ``metaworld/easy``).

**Files name tasks; only the user imports code.** A checkpoint, a store manifest or an
export records the task it was made on, and a file can say anything: a ``module:attr``
reference read from one would import whatever module it names. So a task read from a file
goes through ``recorded_task``, which accepts registered tasks and installed entry points,
and imports a ``module:attr`` reference only when the user gave the same reference on the
command line (``--task``).
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import entry_points
from typing import Any, Callable, Protocol

import gymnasium as gym
import numpy as np

from sim import experts
from sim.fleet import RobotProfile
from sim.metaworld_tasks import FAMILY, GROUPS, TASK_INDEX, MetaWorldExpert, task_name

ENTRY_POINT_GROUP = "robofleet.tasks"


class Expert(Protocol):
    def reset(self, seed: int | None = None) -> None: ...

    def __call__(self, observation: dict) -> np.ndarray: ...


def robofleet_env_kwargs(profile: RobotProfile) -> dict[str, Any]:
    """Env kwargs of the built-in tasks: the whole profile."""
    return {"profile": profile.to_dict()}


@dataclass(frozen=True)
class TaskSpec:
    """One task: env id, expert factory, and profile -> env kwargs."""

    name: str
    env_id: str
    expert_factory: Callable[[RobotProfile], Expert]
    env_kwargs: Callable[[RobotProfile], dict[str, Any]] = field(default=robofleet_env_kwargs)
    supports_cameras: bool = True

    def make_env(self, profile: RobotProfile, cameras: tuple[str, ...] = (), image_size: int = 96,
                 **kwargs) -> gym.Env:
        """``gymnasium.make`` this task's env for one robot; extra kwargs go to the env.

        Camera arguments reach the env only when cameras are asked for, so tasks
        without cameras never see them.
        """
        if cameras:
            if not self.supports_cameras:
                raise ValueError(f"task {self.name!r} does not support cameras")
            kwargs.update(cameras=tuple(cameras), image_size=image_size)
        return gym.make(self.env_id, **self.env_kwargs(profile), **kwargs)

    def make_expert(self, profile: RobotProfile) -> Expert:
        return self.expert_factory(profile)


BUILTIN_TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("reach", "robofleet/Reach-v0", experts.ReachExpert),
        TaskSpec("push", "robofleet/Push-v0", experts.PushExpert),
        TaskSpec("pick_place", "robofleet/PickPlace-v0", experts.PickPlaceExpert),
        TaskSpec("stack", "robofleet/Stack-v0", experts.StackExpert),
    )
}
# Meta-World's tasks: named by their env id, their env made from the whole profile as the built-in tasks'.
METAWORLD_TASKS: dict[str, TaskSpec] = {
    task_name(task): TaskSpec(task_name(task), task_name(task), partial(MetaWorldExpert, task)) for task in TASK_INDEX
}
# Every group a command that takes many tasks accepts (group name -> its tasks' names, in the order their
# task_index counts them): the built-in tasks' own, then Meta-World's (sim/metaworld_tasks.py).
TASK_GROUPS: dict[str, tuple[str, ...]] = {
    "robofleet/all": tuple(BUILTIN_TASKS),
    **{group: tuple(map(task_name, tasks)) for group, tasks in GROUPS.items()},
}


def is_group(name: object) -> bool:
    """Whether ``name`` is a group of tasks (a key of ``TASK_GROUPS``)."""
    return isinstance(name, str) and name in TASK_GROUPS


def _load_reference(reference: str) -> TaskSpec:
    module_name, _, attribute = reference.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot load task reference {reference!r}: {error}") from None
    if not isinstance(target, TaskSpec):
        raise ValueError(f"task reference {reference!r} is a {type(target).__name__}, not a sim.TaskSpec")
    return target


def plugin_tasks() -> dict[str, TaskSpec]:
    """Tasks that installed packages declare in the ``robofleet.tasks`` entry-point group."""
    return {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}


def available_tasks() -> list[str]:
    """Names of every task that ``resolve_task`` accepts without a module reference."""
    return sorted({*BUILTIN_TASKS, *METAWORLD_TASKS, *plugin_tasks()})


def is_registered(name: str) -> bool:
    """Whether ``name`` is a built-in task, its env id, a Meta-World task, or an installed entry point: a task
    whose code the user chose by installing it, which a file may name."""
    return (name in BUILTIN_TASKS or any(name == spec.env_id for spec in BUILTIN_TASKS.values())
            or name in METAWORLD_TASKS or name in plugin_tasks())


def recorded_task(reference: str, given: str | None, where: str) -> TaskSpec:
    """The ``TaskSpec`` of the task a file names (``where``: which file, for the message).

    A registered task or installed entry point resolves. A ``module:attr`` reference is imported
    only when ``given`` (the user's ``--task``) is the same reference; otherwise a one-line
    ``ValueError`` names the flag, and nothing is imported.
    """
    if not isinstance(reference, str) or not reference:
        raise ValueError(f"{where} names no task")
    if ":" in reference and not is_registered(reference) and reference != given:
        raise ValueError(f"{where} names the plug-in task {reference!r}, which would import code: "
                         f"RoboFleet imports only what you name, so pass --task {reference} if you trust it")
    return resolve_task(reference)


def recorded_tasks(reference: str, given: str | None, where: str) -> list[TaskSpec]:
    """``recorded_task`` for a file that may name a group (a multi-task collection's manifest): its tasks."""
    return resolve_tasks(reference) if is_group(reference) else [recorded_task(reference, given, where)]


def resolve_task(name: str | TaskSpec) -> TaskSpec:
    """The ``TaskSpec`` for a name the user gave: a short name, env id, entry-point name or ``module:attr``
    (a task read from a file goes through ``recorded_task``)."""
    if isinstance(name, TaskSpec):
        return name
    if name in BUILTIN_TASKS:
        return BUILTIN_TASKS[name]
    if name in METAWORLD_TASKS:
        return METAWORLD_TASKS[name]
    if is_group(name):
        raise ValueError(f"{name!r} is a group of {len(TASK_GROUPS[name])} tasks and this takes one task; "
                         f"name one of them, e.g. {TASK_GROUPS[name][0]}")
    if name.startswith(f"{FAMILY}/"):
        raise ValueError(f"unknown Meta-World task {name!r}{_did_you_mean(name)}; "
                         f"name an MT50 task (e.g. metaworld/pick-place-v3) or a group ({', '.join(GROUPS)})")
    for spec in BUILTIN_TASKS.values():
        if name == spec.env_id:
            return spec
    plugins = plugin_tasks()
    if name in plugins:
        loaded = plugins[name].load()
        if not isinstance(loaded, TaskSpec):
            raise ValueError(f"entry point {name!r} in {ENTRY_POINT_GROUP} is not a sim.TaskSpec")
        return loaded
    if ":" in name:
        return _load_reference(name)
    raise ValueError(
        f"unknown task {name!r}; choose from {', '.join(sorted({*BUILTIN_TASKS, *plugins}))}, a Meta-World task "
        "(metaworld/pick-place-v3, ...), a group (robofleet/all, metaworld/mt10, ...) or give a module:attr reference"
    )


def resolve_tasks(name: str | TaskSpec) -> list[TaskSpec]:
    """The tasks a name stands for: a group's (``robofleet/all``, ``metaworld/mt10``), in its order, or the one
    task that ``resolve_task`` resolves."""
    if is_group(name):
        return [resolve_task(task) for task in TASK_GROUPS[name]]
    return [resolve_task(name)]


def _did_you_mean(name: str) -> str:
    """A hint naming the Meta-World task or group closest to ``name``, compared without the shared prefix."""
    prefix = f"{FAMILY}/"
    choices = [choice.removeprefix(prefix) for choice in (*METAWORLD_TASKS, *GROUPS)]
    close = difflib.get_close_matches(name.removeprefix(prefix), choices, n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""
