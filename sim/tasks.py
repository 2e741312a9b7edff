"""Tasks: what collection and evaluation need to run a robot on something.

A task is three things (``TaskSpec``): a gymnasium env id, a factory that builds the
scripted expert for a robot profile, and a function from a profile to the env's
keyword arguments. The built-in tasks are registered here; outside tasks come in
without editing this package, in either of two ways:

- an entry point in the group ``robofleet.tasks`` whose object is a ``TaskSpec``
  (the entry point's name becomes the task name), or
- a ``module:attr`` reference, accepted wherever a task name is, to a ``TaskSpec``.

Wherever a task is named, ``resolve_task`` accepts a short name (``pick_place``),
a registered env id (``robofleet/PickPlace-v0``), an entry-point name, or a
``module:attr`` reference.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable, Protocol

import gymnasium as gym
import numpy as np

from sim import experts
from sim.fleet import RobotProfile

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
    return sorted({*BUILTIN_TASKS, *plugin_tasks()})


def resolve_task(name: str | TaskSpec) -> TaskSpec:
    """The ``TaskSpec`` for a short name, env id, entry-point name or ``module:attr``."""
    if isinstance(name, TaskSpec):
        return name
    if name in BUILTIN_TASKS:
        return BUILTIN_TASKS[name]
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
        f"unknown task {name!r}; choose from {', '.join(available_tasks())} or give a module:attr reference"
    )
