"""The dask client every stage that runs on dask uses: of any cluster (``--scheduler``), or of a
LocalCluster of worker processes on this machine, tuned for short pure-Python tasks."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Iterator, Sequence

import dask
from distributed import Client, LocalCluster

# A local cluster's housekeeping competes with the tasks for the cores, so it is turned down:
# dask's statistical profiler samples every worker's Python stack many times a second, which
# on pure-Python simulation tasks is a large share of the work, and the event-loop tick,
# system monitor and worker memory monitor wake the client and every worker often. (External
# clusters: set the same keys, for example DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False,
# where the workers start.) dask also starts its workers with MALLOC_TRIM_THRESHOLD_=65536, so
# that glibc hands freed memory back to the system at once; torch then faults it in again at
# every step, which slows training in the workers (federated rounds). Our workers are
# short-lived, so they keep glibc's own threshold. What each setting cost: docs/performance.md.
LOCAL_CLUSTER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
}


@contextmanager
def environ_restored() -> Iterator[None]:
    """Give ``os.environ`` back as it was on entry, whatever changed it in between.

    dask's nannies set their workers' variables in the process that starts them, before
    each spawn: ``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1``, ``OPENBLAS_NUM_THREADS=1``,
    ``MALLOC_TRIM_THRESHOLD_=65536`` and more. Left there, they reached every process
    started afterwards: bc.py run after an in-process collection trained slower (the trim
    threshold makes glibc hand memory back and fault it in again at every step) and on one
    thread.
    """
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        os.environ.update((key, value) for key, value in saved.items() if os.environ.get(key) != value)


@contextmanager
def dask_client(scheduler: str | None, workers: int, preload: Sequence[str] = (),
                show_dashboard: bool = False) -> Iterator[Client]:
    """A client of the dask ``scheduler`` at that address, or of a fresh LocalCluster of ``workers`` processes.

    ``preload`` names modules the local workers import while the cluster starts.
    ``show_dashboard`` prints the link to the cluster's dashboard (bokeh serves it).
    """
    with _client(scheduler, workers, preload) as client:
        if show_dashboard:
            print(f"dask dashboard: {client.dashboard_link}", flush=True)
        yield client


@contextmanager
def _client(scheduler: str | None, workers: int, preload: Sequence[str]) -> Iterator[Client]:
    """``dask_client``'s client: of the given scheduler, or of a LocalCluster made for it."""
    if scheduler:
        try:
            client = Client(scheduler, timeout="5s")
        except (OSError, TimeoutError) as error:
            raise ValueError(f"cannot reach dask scheduler {scheduler}: {error}") from None
        with client:
            yield client
        return
    with dask.config.set(LOCAL_CLUSTER_CONFIG), environ_restored():
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True,
            # The dashboard on any free local port: on dask's 8787, a second command running at the same time
            # found it taken and printed a warning.
            dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR,
            preload=list(preload),
        )
        with cluster, Client(cluster) as client:
            yield client
