"""One federated round on dask: sample the clients, run them against a deadline, sort out who made it.

``sample_clients`` draws a round's robots from the seed, the round and the attempt
alone, so a resumed run samples what an uninterrupted one would.

``run_clients`` puts the global weights on every worker once (not once per task),
submits one task per client and waits until all are done or the round's deadline has
passed. Each client ends up in one of three groups:

- *completed*: finished in time; its update goes into the average;
- *failed*: raised, its worker died more often than dask reschedules a task
  (``distributed.scheduler.allowed-failures``), or the scheduler cancelled it (a killed
  worker can take what a task needs with it: "already forgotten"); left out of the round;
- *late*: not finished at the deadline; its update is dropped (not applied later
  with a staleness weight), so every delta the server applies was computed from the
  current global weights. The late tasks are cancelled, and the workers still running
  them are restarted (through their nanny), so a hung client cannot hold a worker
  into the next round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError
from dataclasses import dataclass, field

import numpy as np
from distributed import Client, wait

from core.errors import one_line
from train.fed.fedavg import ClientJob, ClientUpdate

log = logging.getLogger(__name__)


def sample_clients(robots: Sequence[int], fraction: float, seed: int, round_index: int, attempt: int) -> list[int]:
    """``max(1, round(fraction * len(robots)))`` robots, drawn without replacement; ascending."""
    count = max(1, round(fraction * len(robots)))
    rng = np.random.default_rng([seed, round_index, attempt, 0])  # the 4th entry keeps it apart from client seeds
    return sorted(int(r) for r in rng.choice(np.asarray(robots), size=count, replace=False))


@dataclass
class RoundResult:
    completed: list[ClientUpdate] = field(default_factory=list)  # ascending robot id
    failed: dict[int, str] = field(default_factory=dict)  # robot id -> the error, one line
    late: list[int] = field(default_factory=list)


def run_clients(client: Client, train: Callable[[ClientJob, np.ndarray], ClientUpdate], jobs: Sequence[ClientJob],
                weights: np.ndarray, deadline: float) -> RoundResult:
    """Run ``train(job, weights)`` for every job as a dask task; wait at most ``deadline`` seconds (see above)."""
    shared = client.scatter(weights, broadcast=True, hash=False)
    futures = {client.submit(train, job, shared, pure=False, retries=0): job.robot_id for job in jobs}
    try:
        wait(list(futures), timeout=deadline)
    except TimeoutError:
        pass  # whoever is not done now is late
    except CancelledError:
        pass  # raised once every task has settled: the cancelled ones failed (below)

    result, late = RoundResult(), []
    for future, robot in futures.items():
        if future.status == "finished":
            try:
                result.completed.append(future.result())
            except Exception as error:  # its result was lost with its worker after it finished
                result.failed[robot] = one_line(error)
        elif future.status == "error":
            result.failed[robot] = one_line(future.exception())
        elif future.status == "cancelled":
            result.failed[robot] = "cancelled by the dask scheduler (a worker it depended on died)"
        else:
            late.append(future)
    result.completed.sort(key=lambda update: update.robot_id)
    result.late = sorted(futures[future] for future in late)
    if late:
        late_keys = {future.key for future in late}
        busy = [worker for worker, keys in client.processing().items() if late_keys & set(keys)]
        client.cancel(late)
        if busy:
            outcome = client.restart_workers(busy, raise_for_error=False)
            if any(status != "OK" for status in outcome.values()):
                log.warning("workers running late clients did not restart: %s", outcome)
    client.cancel([*futures, shared])  # release the weights and the results held on the workers
    return result
