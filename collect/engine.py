"""Runs a collection on dask: one task per robot, progress, retries, summary.

By default the work runs on a ``LocalCluster`` of worker processes (one per core);
with ``--scheduler`` it runs on any existing cluster through the same code path.
Each robot is one task that writes only its own store, so there is never more than
one writer per shard. Tasks are retried when they raise, and dask reschedules the
task of a worker that dies (up to ``distributed.scheduler.allowed-failures`` times);
either way the retry resumes from the store's last commit.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import dask
from distributed import Client, LocalCluster, as_completed

from collect.config import CollectConfig
from collect.manifest import check_output, create_output, write_manifest
from collect.schema import features_of
from collect.shard import store_bytes, store_name
from collect.worker import PROGRESS_TOPIC, Actor, RobotJob, RobotReport, collect_robot_on_worker
from sim.fleet import RobotProfile, episode_seed, make_fleet
from sim.rollout import replay_difference
from sim.shared import code_version, progress_bar
from sim.tasks import TaskSpec, resolve_task

TASK_RETRIES = 2

# A local cluster's housekeeping competes with the tasks for the cores (2 here), so it is
# turned down. dask's statistical profiler samples every worker's Python stack each 10 ms:
# on these pure-Python simulation tasks it cost 40% of the throughput. The event-loop tick
# (20 ms), system monitor (0.5 s) and worker memory monitor (0.1 s) together took 5% of a
# core in the client's process and 2-3% in each worker: measured on a 2-worker evaluation,
# they made it 7-10% faster. (External clusters: set the same keys, for example
# DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False, where the workers start.)
# dask also starts its workers with MALLOC_TRIM_THRESHOLD_=65536, so that glibc hands freed
# memory back to the system at once; torch then faults it in again at every step, which made
# bc.py's steps 15-20% slower and federated rounds ~7% (local training in the workers). Our
# workers are short-lived, so they keep glibc's own threshold.
LOCAL_CLUSTER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
}


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


@contextmanager
def environ_restored() -> Iterator[None]:
    """Give ``os.environ`` back as it was on entry, whatever changed it in between.

    dask's nannies set their workers' variables in the process that starts them, before
    each spawn: ``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1``, ``OPENBLAS_NUM_THREADS=1``,
    ``MALLOC_TRIM_THRESHOLD_=65536`` and more. Left there, they reached every process
    started afterwards: bc.py run after an in-process collection trained 18-30% slower
    (the trim threshold makes glibc hand memory back and fault it in again at every step)
    and on one thread.
    """
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        os.environ.update((key, value) for key, value in saved.items() if os.environ.get(key) != value)


@contextmanager
def dask_client(config: CollectConfig, preload: Sequence[str] = ("collect.worker",),
                show_dashboard: bool = False) -> Iterator[Client]:
    """A client of ``config.scheduler``, or of a fresh LocalCluster of ``config.workers`` processes.

    ``config`` is any config with those two fields (collect's, federated training's).
    ``preload`` names modules the local workers import while the cluster starts.
    ``show_dashboard`` prints the link to the cluster's dashboard (bokeh serves it).
    """
    with _client(config, preload) as client:
        if show_dashboard:
            print(f"dask dashboard: {client.dashboard_link}", flush=True)
        yield client


@contextmanager
def _client(config: CollectConfig, preload: Sequence[str]) -> Iterator[Client]:
    """``dask_client``'s client: of the given scheduler, or of a LocalCluster made for it."""
    if config.scheduler:
        try:
            client = Client(config.scheduler, timeout="5s")
        except (OSError, TimeoutError) as error:
            raise ValueError(f"cannot reach dask scheduler {config.scheduler}: {error}") from None
        with client:
            yield client
        return
    with dask.config.set(LOCAL_CLUSTER_CONFIG), environ_restored():
        cluster = LocalCluster(
            n_workers=config.workers, threads_per_worker=1, processes=True,
            # The dashboard on any free local port: on dask's 8787, a second command running at the same time
            # found it taken and printed a warning.
            dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR,
            preload=list(preload),  # collect.worker: import sim, mujoco and zarr while the cluster starts
        )
        with cluster, Client(cluster) as client:
            yield client


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
    """Refuse, in one line, a task whose first episode is not the same twice from the same seed."""
    stream = (actor.seed_stream, actor.seed_round) if actor else ("collect", 0)
    seed = episode_seed(config.seed, profile.robot_id, 0, *stream)
    if difference := replay_difference(env, spec.make_expert(profile), seed):
        raise ValueError(f"task {config.task!r} is not deterministic: two resets with seed {seed} gave a different "
                         f"{difference}; its reset(seed) must fix the episode (docs/sim.md, plug-in tasks; "
                         "collect --no-check-determinism skips this check)")


def probe_task(config: CollectConfig, actor: Actor | None = None) -> tuple[TaskSpec, list[RobotProfile], dict, int]:
    """The task, fleet, features and fps of ``config``, from one env of its first robot; a task that does
    not make the same first episode twice from one seed is a ``ValueError`` first (unless
    ``config.check_determinism`` is off)."""
    spec = resolve_task(config.task)
    fleet = make_fleet(config.robots, config.seed)
    probe = spec.make_env(fleet[0], cameras=config.cameras, image_size=config.image_size)
    features, fps = features_of(probe), int(probe.metadata.get("render_fps", 0))
    try:
        if config.check_determinism:
            _check_deterministic(config, spec, probe, fleet[0], actor)
    finally:
        probe.close()
    return spec, fleet, features, fps


def run_collection(config: CollectConfig, robot_episodes: dict[int, int] | None = None,
                   actor: Actor | None = None) -> CollectionSummary:
    """Collect every robot's missing episodes into ``config.out``; resumable.

    ``robot_episodes`` (robot id -> episodes attempted) limits the work to those robots of the
    fleet, each with its own count: what ``dataset verify --repair`` recollects. ``actor``
    acts instead of the task's expert (``collect.worker.Actor``; DAgger's rounds). Before anything
    is written, a task that does not make the same first episode twice from one seed is a
    ``ValueError`` (unless ``config.check_determinism`` is off).
    """
    spec, fleet, features, fps = probe_task(config, actor)
    targets = robot_episodes or {profile.robot_id: config.episodes for profile in fleet}
    out = Path(config.out)
    check_output(out, config, features)
    attrs = {"task": spec.name, "env_id": spec.env_id, "fps": fps, "code_version": code_version(),
             "data_config": config.data_config(), **({"lineage": actor.lineage} if actor else {})}
    jobs = [
        RobotJob(str(out / store_name(p.robot_id)), p.to_dict(), config.task, config.seed, targets[p.robot_id],
                 config.cameras, config.image_size, config.keep_failures, config.flush_frames, attrs, actor)
        for p in fleet if p.robot_id in targets
    ]
    return run_robot_tasks(config, spec, features, fps, fleet, targets,
                           lambda client: [client.submit(collect_robot_on_worker, job, retries=TASK_RETRIES, pure=False)
                                           for job in jobs],
                           lineage=actor.lineage if actor else None)


def run_robot_tasks(config: CollectConfig, spec: TaskSpec, features: dict, fps: int, fleet: list[RobotProfile],
                    targets: dict[int, int], submit: Callable[[Client], list], lineage: dict | None = None,
                    preload: Sequence[str] = ("collect.worker",)) -> CollectionSummary:
    """Run the tasks ``submit(client)`` starts (each future gives a ``RobotReport``, or a list of them for the
    robots it wrote) into ``config.out``: the dask client, the progress bar of the ``targets`` (robot id ->
    episodes), the manifest before and after, and the summary. What a collection does whoever acts in it
    (collect's experts, train/fleet's deployments). A local cluster's workers import ``preload`` as they start,
    before the timing does."""
    out = Path(config.out)
    reports: list[RobotReport] = []
    entered = time.perf_counter()
    with dask_client(config, preload, show_dashboard=not config.quiet) as client:
        started = time.perf_counter()
        settled = {robot_id: count for robot_id, count in create_output(out, config).items() if robot_id in targets}
        progress = _Progress(sum(targets.values()), settled, config.quiet)
        write_manifest(out, config, spec, features, fps, fleet, lineage=lineage)
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
            write_manifest(out, config, spec, features, fps, fleet, reports, lineage=lineage)
        wall_seconds = time.perf_counter() - started
    cluster_seconds = time.perf_counter() - entered - wall_seconds

    per_site: dict[str, dict[str, int]] = defaultdict(lambda: {"kept": 0, "failed": 0, "frames": 0})
    for report in reports:
        for key in ("kept", "failed", "frames"):
            per_site[report.site][key] += getattr(report, key)
    reports.sort(key=lambda r: r.robot_id)
    return CollectionSummary(reports, wall_seconds, cluster_seconds, store_bytes(out), dict(per_site))
