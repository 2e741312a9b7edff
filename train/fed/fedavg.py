"""Federated averaging: what one client does in a round, and how the server combines the results.

Each round, every sampled robot gets the current global weights of the shared part of
the policy and a ``ClientJob``: its own head when heads are personal, its error-feedback
residual when deltas are top-k sparsified, and the settings. ``train_client`` (one dask
task) builds the policy from those weights, trains it on that robot's episodes alone for ``local_epochs``
passes (AdamW, optionally with the FedProx term ``mu/2 |w - w_global|^2``) and returns a
``ClientUpdate``: the delta ``client - global`` of the shared weights encoded for the
wire, its sample count and its mean local loss. The server decodes the deltas and
averages them weighted by sample count (``weighted_average``: FedAvg), then moves the
global weights by ``server_lr`` times that average. A ``fit_head_only`` job (``--head-epochs``)
trains only the robot's head, for ``head_epochs`` passes, on the frozen global weights,
and sends back just the head.

Shared weights travel as one flat float32 vector: the floating-point state-dict entries
outside the head, concatenated in state-dict order (``flatten`` / ``unflatten``).
Clients are stateless: everything a robot would keep between rounds (its head, its
residual) comes in the job and goes back in the update.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset.loader import make_dataloader
from dataset.windows import FleetWindowDataset, WindowSpec
from train.comm.compression import encode_update
from train.fed.federated_config import FederatedConfig
from train.policies.policy import PolicySpec, make_policy
from train.schedule import adamw

State = dict[str, torch.Tensor]


def flatten(state: State, keys: Sequence[str]) -> torch.Tensor:
    """The entries ``keys`` of a state dict as one flat float32 vector."""
    return torch.cat([state[key].detach().reshape(-1).float().cpu() for key in keys])


def unflatten(vector: torch.Tensor, keys: Sequence[str], like: State) -> State:
    """The inverse of ``flatten``: entries ``keys`` shaped and typed like those of ``like``."""
    state, offset = {}, 0
    for key in keys:
        size = like[key].numel()
        state[key] = vector[offset: offset + size].reshape(like[key].shape).to(like[key].dtype).clone()
        offset += size
    if offset != vector.numel():
        raise ValueError(f"a vector of {vector.numel()} values does not fit entries of {offset}")
    return state


def shared_keys(state: State, head: Sequence[str] = ()) -> list[str]:
    """The state-dict entries the fleet averages: every floating-point one outside ``head``."""
    return [key for key, value in state.items() if value.is_floating_point() and key not in set(head)]


def weighted_average(vectors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """``sum_k w_k v_k / sum_k w_k``, accumulated in float64 in the given order.

    Identical vectors average to themselves exactly, and the same inputs in the same
    order give the same bits (the server sorts its clients by robot id).
    """
    if not vectors or sum(weights) <= 0:
        raise ValueError("nothing to average: no vectors or no weight")
    total = torch.zeros(vectors[0].numel(), dtype=torch.float64)
    for vector, weight in zip(vectors, weights):
        total += vector.reshape(-1).double() * float(weight)
    return (total / float(sum(weights))).float().reshape(vectors[0].shape)


def average_states(states: Sequence[State], weights: Sequence[float]) -> State:
    """The weighted average of state dicts with the same keys (heads of one site, the fallback head)."""
    keys = list(states[0])
    return unflatten(weighted_average([flatten(s, keys) for s in states], weights), keys, states[0])


def client_seed(seed: int, round_index: int, robot_id: int) -> int:
    """The seed of one robot's local training in one round (its shuffles)."""
    return int(np.random.default_rng([seed, round_index, robot_id]).integers(2**31))


@dataclass
class ClientJob:
    """What the server sends one robot for one round, besides the global weights."""

    robot_id: int
    round: int
    config: FederatedConfig
    policy_spec: dict
    stats: dict
    shared_keys: list[str]  # the entries of the flat weight vector, in order
    head: State | None  # personal heads: this robot's (or its site's) head
    residual: torch.Tensor | None  # top-k: what this robot has not sent yet
    lr_factor: float  # the round's place in the learning-rate schedule
    fit_head_only: bool = False  # --head-epochs: fit the head to the global weights, those frozen
    threads: int = 1  # torch threads (the server's share of the host's cores per client worker)


@dataclass
class ClientUpdate:
    """What one robot sends back: its encoded delta, sample count and loss, plus its local state."""

    robot_id: int
    samples: int  # training windows: the FedAvg weight
    loss: float  # mean local training loss over the round's steps
    steps: int
    payload: dict  # train.comm.compression.encode_update of (client - global) shared weights: the upload
    head: State | None
    residual: torch.Tensor | None
    seconds: float


def train_client(job: ClientJob, weights: np.ndarray) -> ClientUpdate:
    """Train from the global shared ``weights`` (flat float32) on robot ``job.robot_id``'s episodes; a dask task."""
    started = time.perf_counter()
    config = job.config
    seed = client_seed(config.seed, job.round, job.robot_id)
    torch.manual_seed(seed)
    torch.set_num_threads(job.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    spec = PolicySpec(**job.policy_spec)
    store = FleetStore.open(config.data)
    window = WindowSpec.of(spec.n_obs_steps, spec.horizon, [*spec.features, "action"], spec.action_start)
    dataset = FleetWindowDataset(store, select_episodes(store, robots=[job.robot_id]), window, mode=config.mode)
    # Daemonic dask workers cannot start DataLoader workers: the client gathers its batches itself.
    loader = make_dataloader(dataset, batch_size=min(config.batch_size, len(dataset)), seed=seed, num_workers=0)

    policy = make_policy(spec, job.stats)
    state = policy.state_dict()
    global_weights = torch.tensor(weights)  # a copy: what dask hands over may be read-only
    state.update(unflatten(global_weights, job.shared_keys, state))
    state.update(job.head or {})
    policy.load_state_dict(state)
    policy.to(device).train()
    shared = set(job.shared_keys)
    anchor = [(p, p.detach().clone()) for name, p in policy.named_parameters() if name in shared]
    if job.fit_head_only:
        for name, parameter in policy.named_parameters():
            parameter.requires_grad_(name not in shared)
    optimizer = adamw(policy.parameters(), lr=config.lr * job.lr_factor, weight_decay=config.weight_decay)

    losses = []
    for _ in range(config.head_epochs if job.fit_head_only else config.local_epochs):
        for batch in loader:
            loss = policy({key: value.to(device) for key, value in batch.items()})
            if not math.isfinite(loss.item()):  # a diverged client is left out instead of poisoning the average
                raise FloatingPointError(f"robot {job.robot_id}: local loss is not finite at step {len(losses)}")
            losses.append(loss.item())
            if config.prox_mu > 0 and not job.fit_head_only:
                loss = loss + config.prox_mu / 2 * sum((p - p0).pow(2).sum() for p, p0 in anchor)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip)
            optimizer.step()

    trained = {key: value.detach().cpu() for key, value in policy.state_dict().items()}
    head = {key: trained[key].clone() for key in job.head} if job.head is not None else None
    if job.fit_head_only:  # the shared weights did not move: only the head goes back
        return ClientUpdate(job.robot_id, len(dataset), float(np.mean(losses)), len(losses), {}, head, job.residual,
                            time.perf_counter() - started)
    delta = flatten(trained, job.shared_keys) - global_weights
    payload, residual = encode_update(delta, config.compression, job.residual, config.topk_fraction)
    return ClientUpdate(job.robot_id, len(dataset), float(np.mean(losses)), len(losses), payload, head, residual,
                        time.perf_counter() - started)
