"""Federated behaviour cloning on dask: robots train on their own shards, a server averages their updates.

    python train/federated.py --data data/fleet --out runs/fed --rounds 20 --local-epochs 2 --fraction 0.5
    python train/federated.py --data data/fleet --out runs/fed-site --compression int8 --personal site
    python train/federated.py ... --scheduler tcp://10.0.0.5:8786      # any dask cluster

Each round samples a fraction of the robots (seeded). Every sampled robot is one dask
task that trains the current global policy on that robot's episodes only and sends
back its delta, compressed on request (``--compression int8|topk``); the server
averages the deltas weighted by sample count (FedAvg) and steps by ``--server-lr``,
with ``--server-momentum`` along a momentum of those averages (FedAvgM; see
train/fed/fedavg.py). With ``--personal robot|site`` the policy's head stays with the
robot (or is shared within its site) and only the rest is averaged across the fleet;
``--personal-after K`` keeps the head shared by the whole fleet for the first K rounds
and splits it from there, so every personal head starts from a fleet-trained one.
``--head-epochs E`` ends the run with a head fit: every robot fits its head to the final
shared weights, those frozen, for E passes over its data (a site's head is then the
mean of its robots' fits). A head trained during the rounds was fitted to the weights
its robot had moved to, not to the average the server then made of them.

A round waits ``--deadline`` seconds for its clients; failed and late ones are left out
(train/fed/rounds.py). If fewer than ``--min-completed`` of them finish, the round is tried
again with a fresh sample, up to ``--round-attempts`` times, and then the run stops
(exit 3) with the last good checkpoint kept.

Every round writes a checkpoint in train/bc.py's format (``RUN/checkpoints/step_<round>``;
``evaluate --checkpoint RUN`` reads it, giving each robot its own head) and a line of
``RUN/metrics.jsonl``. Rerunning the command resumes after the last checkpointed round
(the last one whose checkpoint loads: a broken one is skipped with a warning).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from core.cluster import dask_client
from core.errors import fail, quiet_closed_pipes
from core.lock import output_lock
from core.files import code_version, repo_relative, write_json_atomic
from core.options import parse_config
from core.progress import progress_bar
from dataset import FleetStore
from dataset.chunks import DataError
from dataset.episodes import select_episodes
from dataset.stats import fleet_stats
from train.checkpoint import Checkpoint, latest_checkpoint, newest_intact_checkpoint, rng_state
from train.comm.compression import decode_update, payload_bytes
from train.data import open_training_store, store_policy_spec
from train.fed.fedavg import (ClientJob, ClientUpdate, State, average_states, flatten, shared_keys, train_client,
                              unflatten, weighted_average)
from train.fed.federated_config import FederatedConfig
from train.fed.rounds import RoundResult, run_clients, sample_clients
from train.identity import collections_trained_on, data_changes, data_identity
from train.monitor import keep_records
from train.policies.policy import PolicySpec, make_policy
from train.schedule import learning_rate_factor
from train.threads import ThreadShare

FLEET_HEAD = "fleet"  # the heads' group before they split (--personal-after)


def state_bytes(state: State | None) -> int:
    """Serialised size of a head (or any state entries) as it would travel."""
    return payload_bytes({key: value.numpy() for key, value in state.items()}) if state else 0


class Server:
    """The fleet's server: the global weights, what it keeps for each robot, and how a round changes them.

    ``weights`` is the flat vector of shared weights (train/fed/fedavg.py). ``heads`` maps a
    personal group (a robot id, or a site name) to its head. ``residuals`` holds each
    robot's top-k error-feedback residual: a robot's own state, which a real robot would
    keep on board; clients here are stateless dask tasks, so the server keeps it for them,
    hands it out in the job and saves it in the checkpoint.
    """

    def __init__(self, config: FederatedConfig, store: FleetStore, spec: PolicySpec, stats: dict, robots: list[int],
                 identity: dict | None = None):
        self.config, self.store, self.spec, self.stats, self.robots = config, store, spec, stats, robots
        self.identity = identity  # what the fleet trains on (train/identity.py), checked on resume
        torch.manual_seed(config.seed)
        policy = make_policy(spec, stats)
        self.template = {key: value.clone() for key, value in policy.state_dict().items()}
        self.head_keys = [] if config.personal == "none" else policy.head_keys()
        self.keys = shared_keys(self.template, self.head_keys)
        self.weights = flatten(self.template, self.keys)
        self.heads: dict[int | str, State] = {}
        self.residuals: dict[int, torch.Tensor] = {}
        self.velocity: dict[int | str | None, torch.Tensor] = {}  # --server-momentum: None (shared) or a group
        self.round, self.bytes_up, self.bytes_down = 0, 0, 0
        self.heads_fitted = False  # --head-epochs: whether the heads were fitted after the last round
        self.client_threads = 1  # torch threads of each client (train/threads.py)

    def heads_split(self) -> bool:
        """Whether the coming round trains personal heads (after the ``--personal-after`` shared rounds)."""
        return self.round >= self.config.personal_after

    def group_of(self, robot: int) -> int | str:
        """Whose head ``robot`` trains in the coming round: the fleet's before the split, else its own or its site's."""
        if not self.heads_split():
            return FLEET_HEAD
        return robot if self.config.personal == "robot" else self.store.site_of(robot)

    def fallback_head(self) -> State:
        """The head of a robot without one of its own: the plain mean of the personal heads; before any,
        the fleet's shared head (``--personal-after``), else the initial head."""
        personal = [self.heads[group] for group in sorted(self.heads, key=str) if group != FLEET_HEAD]
        if personal:
            return average_states(personal, [1.0] * len(personal))
        return self.heads.get(FLEET_HEAD, {key: self.template[key] for key in self.head_keys})

    def head_of(self, robot: int) -> State | None:
        """The head ``robot`` trains from: its own (or its site's), else the fallback; None without personal heads."""
        if not self.head_keys:
            return None
        group = self.group_of(robot)
        return self.heads[group] if group in self.heads else self.fallback_head()

    def job(self, robot: int, round_index: int) -> ClientJob:
        head = self.head_of(robot)
        lr_factor = learning_rate_factor(round_index - 1, self.config.warmup_rounds, self.config.rounds)
        return ClientJob(robot, round_index, self.config, self.spec.to_dict(), self.stats, self.keys, head,
                         self.residuals.get(robot), lr_factor, threads=self.client_threads)

    def traffic(self, jobs: list[ClientJob], result: RoundResult) -> dict[str, int]:
        """Bytes down (every sampled client got the weights) and up (completed clients' payloads).

        A head shared by several robots travels (a site's, or the fleet's before the split); a
        robot's own head and its residual would stay on board, so they count as
        ``state_bytes``, not as traffic.
        """
        shared_heads = self.config.personal == "site" or not self.heads_split()
        down = sum(payload_bytes(self.weights.numpy()) + (state_bytes(job.head) if shared_heads else 0) for job in jobs)
        up = sum((payload_bytes(u.payload) if u.payload else 0) + (state_bytes(u.head) if shared_heads else 0)
                 for u in result.completed)  # a head fit sends no payload
        local = sum(state_bytes(u.head) * (not shared_heads) + (u.residual.numel() * 4 if u.residual is not None else 0)
                    for u in result.completed)
        return {"bytes_up": up, "bytes_down": down, "state_bytes": local}

    def server_step(self, group: int | str | None, mean: torch.Tensor, mean_delta: torch.Tensor) -> torch.Tensor:
        """Where the server puts weights its clients moved by ``mean_delta`` on average, to ``mean``.

        ``start + server_lr x step``, where the step is ``mean_delta`` or, with ``--server-momentum m``
        (FedAvgM), ``velocity = m x velocity + mean_delta`` (one velocity per ``group``: None for the
        shared weights, a robot or site for its head). Written as ``mean + (server_lr x step - mean_delta)``
        so that plain FedAvg (server lr 1, no momentum) lands exactly on the clients' mean.
        """
        step = mean_delta
        if self.config.server_momentum > 0:
            step = self.config.server_momentum * self.velocity.get(group, torch.zeros_like(mean_delta)) + mean_delta
            self.velocity[group] = step
        return mean + (self.config.server_lr * step - mean_delta)

    def heads_by_group(self, updates: list[ClientUpdate]) -> dict[int | str, list[ClientUpdate]]:
        """The updates that carry a head, by the group (robot, site or fleet) whose head they trained."""
        groups: dict[int | str, list[ClientUpdate]] = {}
        for update in updates:
            if update.head is not None:
                groups.setdefault(self.group_of(update.robot_id), []).append(update)
        return groups

    def apply(self, updates: list[ClientUpdate]) -> None:
        """FedAvg: the sample-weighted mean delta, through ``server_step``; keep heads and residuals.

        Heads take the same server step, towards the mean of the heads their robot (or site) trained.
        """
        deltas = [decode_update(u.payload, self.weights) for u in updates]
        mean_delta = weighted_average(deltas, [u.samples for u in updates])
        for update in updates:
            if update.residual is not None:
                self.residuals[update.robot_id] = update.residual
        groups = self.heads_by_group(updates)
        started_from = {group: self.head_of(members[0].robot_id) for group, members in groups.items()}
        for group, members in groups.items():  # one robot's own head, or a site's
            start = flatten(started_from[group], self.head_keys)
            mean = flatten(average_states([m.head for m in members], [m.samples for m in members]), self.head_keys)
            self.heads[group] = unflatten(self.server_step(group, mean, mean - start), self.head_keys,
                                          started_from[group])
        self.weights = self.server_step(None, self.weights + mean_delta, mean_delta)

    def model_state(self) -> State:
        state = dict(self.template)
        state.update(unflatten(self.weights, self.keys, self.template))
        if self.head_keys:
            state.update(self.fallback_head())
        return state

    def checkpoint(self) -> Checkpoint:
        """The fleet policy's checkpoint: bc.py's, plus ``personal`` (robot id -> head) and the server's own state."""
        personal = {}
        if self.head_keys:
            personal = {robot: self.heads[self.group_of(robot)] for robot in self.store.robots
                        if self.group_of(robot) in self.heads}
        server = {"round": self.round, "personal": self.config.personal, "shared_keys": self.keys,
                  "heads": self.heads, "residuals": self.residuals, "velocity": self.velocity,
                  "bytes_up": self.bytes_up, "bytes_down": self.bytes_down, "heads_fitted": self.heads_fitted}
        return Checkpoint(spec=self.spec, weights=self.model_state(), stats=self.stats, features=self.store.features,
                          step=self.round, epoch=self.round, task=(self.store.manifest or {}).get("task"),
                          config=asdict(self.config), data=repo_relative(self.store.path), identity=self.identity,
                          collections=collections_trained_on([], repo_relative(self.store.path), self.identity),
                          code_version=code_version(), personal=personal,
                          training={"rng": rng_state(), "federated": server})

    def restore(self, checkpoint: Checkpoint) -> None:
        state = checkpoint.training.get("federated")
        if state is None or checkpoint.spec != self.spec \
                or state["personal"] != self.config.personal or state["shared_keys"] != self.keys:
            fail(f"{self.config.out} holds a different run (not federated, or another policy or --personal); "
                 "use another --out or --no-resume")
        if None not in (checkpoint.identity, self.identity) and checkpoint.identity != self.identity:
            changes = "; ".join(data_changes(checkpoint.identity, self.identity)) or "another task or features"
            fail(f"cannot resume {self.config.out}: it was trained on other data ({changes}); train in another --out")
        self.weights = flatten(checkpoint.weights, self.keys)
        self.heads, self.residuals = state["heads"], state["residuals"]
        self.velocity = state.get("velocity", {})
        self.round, self.bytes_up, self.bytes_down = state["round"], state["bytes_up"], state["bytes_down"]
        self.heads_fitted = state.get("heads_fitted", False)

    def fit_heads(self, updates: list[ClientUpdate]) -> None:
        """Each group's head becomes the sample-weighted mean of its robots' fitted heads (no server step)."""
        for group, members in self.heads_by_group(updates).items():
            self.heads[group] = average_states([m.head for m in members], [m.samples for m in members])
        self.heads_fitted = True


def account(server: Server, jobs: list[ClientJob], result: RoundResult) -> dict:
    """Add a try's traffic to the server's totals; the metrics of its clients (part of a metrics.jsonl line)."""
    traffic = server.traffic(jobs, result)
    server.bytes_up += traffic["bytes_up"]
    server.bytes_down += traffic["bytes_down"]
    samples = sum(u.samples for u in result.completed)
    return {"completed": [u.robot_id for u in result.completed], "failed": {str(r): e for r, e in result.failed.items()},
            "late": result.late, "samples": samples,
            "loss": sum(u.loss * u.samples for u in result.completed) / samples if samples else None, **traffic,
            "total_bytes_up": server.bytes_up, "total_bytes_down": server.bytes_down}


def play_round(client, train: Callable[[ClientJob, np.ndarray], ClientUpdate], server: Server, round_index: int,
               log: Callable[[dict], None], share: ThreadShare | None = None) -> dict:
    """One round: up to ``round_attempts`` tries, each on a fresh sample; ``log`` gets each try's metrics record.

    ``share`` (on a local cluster) sets each try's client threads.

    The server's weights change only on a try in which enough clients completed (its
    record is returned); a round with no such try stops the run with exit code 3.
    """
    config = server.config
    for attempt in range(config.round_attempts):
        started = time.perf_counter()
        if share is not None:
            server.client_threads = share.refresh()
        sampled = sample_clients(server.robots, config.fraction, config.seed, round_index, attempt)
        jobs = [server.job(robot, round_index) for robot in sampled]
        result = run_clients(client, train, jobs, server.weights.numpy(), config.deadline)
        needed = max(1, math.ceil(config.min_completed * len(sampled)))
        applied = len(result.completed) >= needed
        if applied:
            server.apply(result.completed)
        record = {"round": round_index, "attempt": attempt, "applied": applied, "sampled": sampled,
                  **account(server, jobs, result), "lr": config.lr * jobs[0].lr_factor,
                  "seconds": time.perf_counter() - started}
        log(record)
        if applied:
            return record
    fail(f"round {round_index}: fewer than {config.min_completed:.0%} of the clients completed in "
         f"{config.round_attempts} attempts (last: failed {result.failed or 'none'}, late {result.late or 'none'}); "
         f"stopping. The last good checkpoint (round {round_index - 1}) is kept in {Path(config.out) / 'checkpoints'}",
         code=3)


def fit_heads_round(client, train: Callable[[ClientJob, np.ndarray], ClientUpdate], server: Server) -> dict:
    """``--head-epochs``: every robot fits its head to the final shared weights; the metrics record.

    A robot that fails or is late keeps the head it had. The weights travel down as in a
    round; only heads shared by several robots (a site's) travel up.
    """
    started = time.perf_counter()
    jobs = [replace(server.job(robot, server.round), fit_head_only=True, lr_factor=1.0) for robot in server.robots]
    result = run_clients(client, train, jobs, server.weights.numpy(), server.config.deadline)
    server.fit_heads(result.completed)
    return {"round": server.round, "head_fit": True, **account(server, jobs, result),
            "seconds": time.perf_counter() - started}


def run_federated(config: FederatedConfig, train: Callable[[ClientJob, np.ndarray], ClientUpdate] = train_client
                  ) -> Path:
    """Run (or resume) federated training as ``config`` says; returns the last checkpoint.

    ``train`` is the client task (a module-level function dask can ship to its workers).
    """
    run = Path(config.out)
    store = open_training_store(config)
    try:
        episodes = select_episodes(store, robots=config.robots or None, sites=config.sites or None)
        stats = fleet_stats(store)  # fleet-wide normalisation, shared by every client (see docs/federated.md)
    except DataError as error:
        fail(str(error))
    robots = sorted({episode.robot_id for episode in episodes})
    if not robots:
        fail(f"no successful episodes in {config.data} match --robots {config.robots} --sites {config.sites}")
    try:
        server = Server(config, store, store_policy_spec(config, store), stats, robots,
                        data_identity(store, episodes))
    except (ValueError, NotImplementedError) as error:
        fail(str(error))
    config.inputs = server.spec.inputs  # auto resolved: the saved config records what the policy sees
    try:
        resumed = newest_intact_checkpoint(run, training=True) if config.resume else None
    except ValueError as error:
        fail(f"{error}; --no-resume starts afresh")
    if resumed is not None:
        server.restore(resumed)

    with contextlib.ExitStack() as stack:
        # a remote cluster's clients run elsewhere: one thread each unless --threads
        share = stack.enter_context(ThreadShare(config.threads, ranks=config.workers, local_ranks=config.workers)) \
            if config.scheduler is None else None
        server.client_threads = share.threads if share else config.threads or 1
        run.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run / "config.json", {"config": asdict(config), "policy_spec": server.spec.to_dict(),
                                                 "robots": robots, "code_version": code_version()})
        # rounds after the last checkpoint (logged just before a crash) are trained again
        keep_records(run / "metrics.jsonl", lambda record: record.get("round", 0) <= server.round)
        clients_per_round = max(1, round(config.fraction * len(robots)))
        if not config.quiet:
            print(f"federated {config.policy} on {len(robots)} robots ({len(episodes)} episodes): {clients_per_round} "
                  f"clients per round x {config.local_epochs} local epoch(s), compression {config.compression}, "
                  f"personal {config.personal}; "
                  + (share.describe("client") if share else f"{server.client_threads} torch thread(s) per client")
                  + (f"; resumed after round {server.round}" if resumed else ""))

        try:
            client = stack.enter_context(dask_client(config.scheduler, config.workers, preload=("train.fed.fedavg",),
                                                     show_dashboard=not config.quiet))
        except ValueError as error:  # an unreachable --scheduler
            fail(str(error))
        metrics = stack.enter_context(open(run / "metrics.jsonl", "a"))
        bar = stack.enter_context(progress_bar(total=config.rounds, initial=server.round, desc="rounds",
                                               unit="round", disable=config.quiet))

        def write(record: dict) -> None:
            metrics.write(json.dumps(record) + "\n")
            metrics.flush()

        def log(record: dict) -> None:
            write(record)
            if not config.quiet:
                bar.write(f"round {record['round']}" + (f" (attempt {record['attempt'] + 1})" if record["attempt"] else "")
                          + f": {len(record['completed'])}/{len(record['sampled'])} clients"
                          + (f", loss {record['loss']:.4g}" if record["loss"] is not None else "")
                          + f", up {record['bytes_up'] / 1e6:.3f} MB, down {record['bytes_down'] / 1e6:.3f} MB, "
                          f"{record['seconds']:.1f} s" + ("" if record["applied"] else ", too few: repeated")
                          + (f", failed {sorted(record['failed'])}" if record["failed"] else "")
                          + (f", late {record['late']}" if record["late"] else ""))

        for round_index in range(server.round + 1, config.rounds + 1):
            play_round(client, train, server, round_index, log, share)
            server.round, server.heads_fitted = round_index, False
            server.checkpoint().save(run, keep=config.keep_checkpoints)
            bar.update(1)
        if config.head_epochs and not server.heads_fitted:
            record = fit_heads_round(client, train, server)
            write(record)
            server.checkpoint().save(run, keep=config.keep_checkpoints)  # replaces it
            if not config.quiet:
                bar.write(f"heads fitted to the final weights: {len(record['completed'])}/{len(server.robots)} "
                          f"robots, {record['seconds']:.1f} s")
    last_checkpoint = latest_checkpoint(run)
    if not config.quiet:
        print(f"done: {run / 'checkpoints' / 'last'} (round {server.round}; "
              f"{server.bytes_up / 1e6:.2f} MB up, {server.bytes_down / 1e6:.2f} MB down in all)")
    return last_checkpoint


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    config = parse_config(FederatedConfig, __doc__, argv)
    try:
        with output_lock(config.out, "train/federated.py"):
            run_federated(config)
    except KeyboardInterrupt:
        last = latest_checkpoint(config.out)
        print(f"\ninterrupted: {last or 'no checkpoint yet'} is kept; rerun to resume", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
