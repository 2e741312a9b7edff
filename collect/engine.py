"""Runs a collection on dask: one task per robot, progress, retries, summary.

By default the work runs on a ``LocalCluster`` of worker processes (one per core);
with ``--scheduler`` it runs on any existing cluster through the same code path.
Each robot is one task that writes only its own store, so there is never more than
one writer per shard. Tasks are retried when they raise, and dask reschedules the
task of a worker that dies (up to ``distributed.scheduler.allowed-failures`` times);
either way the retry resumes from the store's last commit.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import gymnasium as gym
from distributed import Client, as_completed

from collect.config import CollectConfig
from collect.output import check_output, create_output, write_manifest
from collect.worker import PROGRESS_TOPIC, Actor, RobotJob, RobotReport, collect_robot_on_worker
from core.cluster import dask_client
from core.files import code_version
from core.progress import progress_bar
from dataset.schema import TASK_FEATURES, features_of, shared_layout
from dataset.shard import store_bytes, store_name
from sim.fleet import RobotProfile, episode_seed, fleet_task, make_fleet
from sim.rollout import replay_difference
from sim.tasks import TaskSpec, is_group, resolve_tasks

TASK_RETRIES = 2


@dataclass
class CollectionSummary:
    reports: list[RobotReport]
    wall_seconds: float  # from the first task submitted to the manifest written
    cluster_seconds: float  # setting up and shutting down dask: a LocalCluster, or the client of --scheduler
    bytes_on_disk: int
    per_site: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def episodes(self) -> int:
        return sum(r.kept for r in self.reports)

    @property
    def frames(self) -> int:
        return sum(r.frames for r in self.reports)

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.reports)

    def format(self) -> str:
        lines = [f"{'site':10s} {'kept':>7s} {'failed':>7s} {'frames':>9s}"]
        for site, counts in sorted(self.per_site.items()):
            lines.append(f"{site:10s} {counts['kept']:7d} {counts['failed']:7d} {counts['frames']:9d}")
        rate = self.steps / self.wall_seconds if self.wall_seconds > 0 else 0.0
        speed = f"{rate:.0f} steps/s" if self.steps else "nothing left to collect"
        lines.append(
            f"{len(self.reports)} robots, {self.episodes} episodes, {self.frames} frames, "
            f"{self.bytes_on_disk / 1e6:.1f} MB, {self.wall_seconds:.1f} s, {speed}"
            + (f" (+{self.cluster_seconds:.1f} s to set up and shut down dask)" if self.cluster_seconds >= 0.05 else "")
        )
        return "\n".join(lines)


class _Progress:
    """A tqdm bar of settled episodes fed by the workers' progress events."""

    def __init__(self, total: int, initial: dict[int, int], quiet: bool):
        self.settled = dict(initial)
        self.lock = threading.Lock()
        self.bar = progress_bar(total=total, initial=sum(initial.values()), desc="episodes", unit="ep", disable=quiet)

    def on_event(self, event) -> None:
        _, message = event
        with self.lock:
            self.settled[message["robot"]] = message["settled"]
            self.bar.update(sum(self.settled.values()) - self.bar.n)  # redraws at the bar's own pace

    def close(self) -> None:
        self.bar.close()


def _check_deterministic(config: CollectConfig, spec: TaskSpec, env, profile: RobotProfile,
                         actor: Actor | None) -> None:
    """Refuse, in one line, a task whose first episode is not the same twice from the same seed (named as the user
    named it, or a group's task by its name)."""
    stream = (actor.seed_stream, actor.seed_round) if actor else ("collect", 0)
    seed = episode_seed(config.seed, profile.robot_id, 0, *stream)
    if difference := replay_difference(env, spec.make_expert(profile), seed):
        shown = spec.name if is_group(config.task) else config.task
        raise ValueError(f"task {shown!r} is not deterministic: two resets with seed {seed} gave a different "
                         f"{difference}; its reset(seed) must fix the episode (docs/sim.md, plug-in tasks; "
                         "collect --no-check-determinism skips this check)")


def probe_task(config: CollectConfig, actor: Actor | None = None) -> tuple[list[TaskSpec], list[RobotProfile], dict,
                                                                           int, dict]:
    """The tasks, fleet, features, fps and tasks' own features of ``config``, from one env of the first robot that
    runs each task (``sim.fleet.fleet_task``: a group's tasks are shared out over the fleet). Each is a
    ``ValueError`` first: a group with more tasks than robots, tasks that record different data (other fps, or
    other features than ``dataset.schema.TASK_OWN_FEATURES``), and a task that does not make the same first episode
    twice from one seed (unless ``config.check_determinism`` is off). A multi-task collection also records each
    frame's task (``dataset.schema.TASK_FEATURES``); the features its tasks record in their own shapes are each
    task's (task -> features, ``dataset.schema.shared_layout``), the features those all share."""
    tasks = resolve_tasks(config.task)
    if len(tasks) > config.robots:
        raise ValueError(f"--task {config.task} has {len(tasks)} tasks and each robot runs one: "
                         f"--robots must be at least {len(tasks)}")
    fleet = make_fleet(config.robots, config.seed)
    layouts, rates = {}, {}
    for profile in fleet[:len(tasks)]:
        spec = fleet_task(tasks, profile.robot_id)
        probe = spec.make_env(profile, cameras=config.cameras, image_size=config.image_size)
        try:
            layouts[spec.name], rates[spec.name] = features_of(probe), int(probe.metadata.get("render_fps", 0))
            if config.check_determinism:
                _check_deterministic(config, spec, probe, profile, actor)
        finally:
            probe.close()
    fps = rates[tasks[0].name]
    if other := next((name for name, rate in rates.items() if rate != fps), None):
        raise ValueError(f"the tasks of {config.task} record at different fps ({tasks[0].name} at {fps}, {other} at "
                         f"{rates[other]}): one collection holds one fps")
    features, task_features = shared_layout(layouts)  # in the group's order: robot k < len(tasks) runs tasks[k]
    return tasks, fleet, {**features, **(TASK_FEATURES if len(tasks) > 1 else {})}, fps, task_features


def robot_task(tasks: list[TaskSpec], robot_id: int) -> tuple[TaskSpec, int | None]:
    """The task robot ``robot_id`` runs in a collection of ``tasks`` (``sim.fleet.fleet_task``) and, in a
    multi-task one, its index in the manifest's list, which its frames record as ``task_index`` (None with one)."""
    spec = fleet_task(tasks, robot_id)
    return spec, (tasks.index(spec) if len(tasks) > 1 else None)


def env_modules(tasks: list[TaskSpec]) -> tuple[str, ...]:
    """The modules of the tasks' env classes, where gymnasium's registry names them by reference. A local
    cluster's workers import them as they start, as they do ``collect.worker``, so that no robot task's time
    holds the first import of its env (Meta-World's imports metaworld)."""
    entry_points = (getattr(gym.registry.get(spec.env_id), "entry_point", None) for spec in tasks)
    return tuple(sorted({point.partition(":")[0] for point in entry_points if isinstance(point, str)}))


def run_collection(config: CollectConfig, robot_episodes: dict[int, int] | None = None,
                   actor: Actor | None = None) -> CollectionSummary:
    """Collect every robot's missing episodes into ``config.out``; resumable.

    ``robot_episodes`` (robot id -> episodes attempted) limits the work to those robots of the
    fleet, each with its own count: what ``collect --repair`` recollects. ``actor``
    acts instead of the task's expert (``collect.worker.Actor``; DAgger's rounds). Before anything
    is written, a task that does not make the same first episode twice from one seed is a
    ``ValueError`` (unless ``config.check_determinism`` is off). A group of tasks (``metaworld/mt10``) is
    shared out over the fleet, each robot running one of them (``sim.fleet.fleet_task``).
    """
    tasks, fleet, features, fps, task_features = probe_task(config, actor)
    targets = robot_episodes or {profile.robot_id: config.episodes for profile in fleet}
    out = Path(config.out)
    check_output(out, config, features, actor.lineage if actor else None)
    attrs = {"fps": fps, "code_version": code_version(), "data_config": config.data_config(),
             **({"lineage": actor.lineage} if actor else {})}
    jobs = []
    for profile in (profile for profile in fleet if profile.robot_id in targets):
        spec, task_index = robot_task(tasks, profile.robot_id)
        # The task as given (a module:attr plug-in resolves only from the user's reference), a group's by name
        task = config.task if task_index is None else spec.name
        jobs.append(RobotJob(str(out / store_name(profile.robot_id)), profile.to_dict(), task, config.seed,
                             targets[profile.robot_id], config.cameras, config.image_size, config.keep_failures,
                             config.flush_frames, {"task": spec.name, "env_id": spec.env_id, **attrs}, actor,
                             task_index))
    return run_robot_tasks(config, tasks, features, fps, fleet, targets,
                           lambda client: [client.submit(collect_robot_on_worker, job, retries=TASK_RETRIES, pure=False)
                                           for job in jobs],
                           lineage=actor.lineage if actor else None, task_features=task_features,
                           preload=("collect.worker", *env_modules(tasks)))


def run_robot_tasks(config: CollectConfig, tasks: list[TaskSpec], features: dict, fps: int, fleet: list[RobotProfile],
                    targets: dict[int, int], submit: Callable[[Client], list], lineage: dict | None = None,
                    preload: Sequence[str] = ("collect.worker",), task_features: dict | None = None
                    ) -> CollectionSummary:
    """Run the tasks ``submit(client)`` starts (each future gives a ``RobotReport``, or a list of them for the
    robots it wrote) into ``config.out``: the dask client, the progress bar of the ``targets`` (robot id ->
    episodes), the manifest before and after, and the summary. What a collection does whoever acts in it
    (collect's experts, train/fleet's deployments). A local cluster's workers import ``preload`` as they start,
    before the timing does. ``task_features`` are the features a group's tasks record each in their own shapes
    (``probe_task``), which the manifest lists per task."""
    out = Path(config.out)
    reports: list[RobotReport] = []
    entered = time.perf_counter()
    with dask_client(config.scheduler, config.workers, preload, show_dashboard=not config.quiet) as client:
        started = time.perf_counter()
        settled = {robot_id: count for robot_id, count in create_output(out, config).items() if robot_id in targets}
        progress = _Progress(sum(targets.values()), settled, config.quiet)
        write_manifest(out, config, tasks, features, fps, fleet, lineage=lineage, task_features=task_features)
        client.subscribe_topic(PROGRESS_TOPIC, progress.on_event)
        futures = submit(client)
        try:
            for future in as_completed(futures):
                result = future.result()
                reports.extend(result if isinstance(result, list) else [result])
        finally:
            client.cancel(futures)
            client.unsubscribe_topic(PROGRESS_TOPIC)
            progress.close()
            write_manifest(out, config, tasks, features, fps, fleet, reports, lineage=lineage,
                           task_features=task_features)
        wall_seconds = time.perf_counter() - started
    cluster_seconds = time.perf_counter() - entered - wall_seconds

    per_site: dict[str, dict[str, int]] = defaultdict(lambda: {"kept": 0, "failed": 0, "frames": 0})
    for report in reports:
        for key in ("kept", "failed", "frames"):
            per_site[report.site][key] += getattr(report, key)
    reports.sort(key=lambda r: r.robot_id)
    return CollectionSummary(reports, wall_seconds, cluster_seconds, store_bytes(out), dict(per_site))
