"""A model of one DDP training step of train/bc.py, fitted to measured timings: pure functions, no I/O.

R ranks, each on its own core (or GPU), batch B per micro-step, ``--grad-accum k``:

    step(R)         = k x (data + compute) + wait(R) + transfer(R)
    samples/s       = R x k x B / step(R)
    sync efficiency = k x compute / (k x compute + wait(R) + transfer(R))

``data`` and ``compute`` are one rank's data wait and forward + backward + optimiser step per
micro-step (the optimiser runs once a step, so with k > 1 this counts it k times: an upper
bound by k - 1 optimiser steps). At one rank they are those of one process alone on its host;
from two ranks on, those of a host whose every core trains (``shared_*``: its ranks share caches
and memory bandwidth), measured as independent processes running at once.

``wait(R)`` is the straggler wait: DDP's ranks meet at every step, so a step lasts as long as
the slowest rank's ``k x (data + compute)``. With the per-step times ``step_times_s`` of the
shared host as R independent draws, wait(R) = E[max of R draws] - E[one draw] (``straggler_s``),
times sqrt(k) for k micro-steps a step (a sum of k draws spreads sqrt(k) times as wide).

``transfer(R)`` is the gradients' all-reduce, once a step, on the last micro-step, bucket by
bucket (``ddp_buckets``: 1 MiB first, then ``--bucket-cap-mb``). None of it is assumed to
overlap the backward pass: the ``shm`` and ``ring`` hooks and PowerSGD on gloo
(``in_bucket_order``) run on the training thread and block it, the default mlp's gradients fit
in one bucket, and gloo's own threads share the rank's core. bc.py counts wait and transfer
together as exposed communication (train/monitor.py), so ``compute_scaling`` checks their sum
against it.

Each transport costs, per call of n bytes between R ranks (``TRANSPORT_ALGORITHMS``),

    t = alpha x f(R) x calls + beta x g(R) x n,     calls = ceil(n / largest call)

- ``ring`` (``train/comm/socket_ring.py``) and ``gloo`` (DDP's all_reduce; gloo's ring
  algorithm assumed): ring all-reduce, f = 2(R - 1), g = 2(R - 1) / R;
- ``int8_exchange`` (what the int8 hook adds from a second rank on): a gloo ring all-gather of
  every rank's n bytes of codes and scales, and dequantising the other ranks' rows into the sum:
  f = R - 1, g = R - 1 (both grow with the other ranks' bytes);
- ``shm`` (``train/comm/shm_all_reduce.py``, ranks on one host): each rank writes its slot,
  one barrier, then reads all R slots: f = 1, g = R + 1 (R > 1), in calls of at most one slot.

At R = 1 every transport costs nothing (f = g = 0). What each ``--comm-hook`` sends:

- ``shm``, ``ring``, ``none`` (gloo): the float32 gradients;
- ``int8``: its codec, what the hook adds to a step on one rank (quantise, one dequantise;
  inside the backward pass too) + an ``int8_exchange`` of each bucket's int8 codes and float32
  block scales (~ bytes / 4);
- ``powersgd``: what it adds to a step on one rank + three gloo all-reduces per bucket: the
  tensors it leaves uncompressed (vectors, small matrices) and the rank-r factors P and Q.
  The first follows the backward pass and is costed cold, as every other call is; the second
  and third follow it within a few small matrix products and are costed warm
  (``Transport.warm``: gloo's threads still awake, the data still in the caches).

``fit_transport`` finds alpha and beta by least squares on relative errors (never negative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from train.comm.compression import INT8_BLOCK

FIRST_BUCKET_BYTES = 1 << 20  # DDP's first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
POWERSGD_MIN_COMPRESSION_RATE = 2  # torch's PowerSGDState default, which train/comm/comm_hooks.py keeps


def _ring_all_reduce(ranks: int) -> tuple[float, float]:
    return 2.0 * (ranks - 1), 2.0 * (ranks - 1) / ranks


def _ring_all_gather(ranks: int) -> tuple[float, float]:
    return float(ranks - 1), float(ranks - 1)


def _shared_memory(ranks: int) -> tuple[float, float]:
    return (1.0, ranks + 1.0) if ranks > 1 else (0.0, 0.0)


# algorithm: (description, (f(R), g(R)))
TRANSPORT_ALGORITHMS = {
    "ring all-reduce": ("f = 2(R-1), g = 2(R-1)/R", _ring_all_reduce),
    "ring all-gather": ("f = R-1, g = R-1", _ring_all_gather),
    "shared memory": ("f = 1, g = R+1", _shared_memory),
}
# transport: (algorithm, what carries it)
TRANSPORTS = {
    "shm": ("shared memory", "--comm-hook shm (auto on one host): SharedMemoryAllReduce"),
    "ring": ("ring all-reduce", "--comm-hook ring (auto across hosts): SocketRing"),
    "gloo": ("ring all-reduce", "--comm-hook none and PowerSGD: gloo all_reduce"),
    "int8_exchange": ("ring all-gather", "--comm-hook int8: gloo all_gather_into_tensor, then dequantise"),
}
HOOK_TRANSPORT = {"shm": "shm", "ring": "ring", "none": "gloo", "int8": "int8_exchange", "powersgd": "gloo"}


@dataclass(frozen=True)
class Transport:
    """One fitted transport: seconds per call are ``alpha_s x f(R) x calls + beta_s_per_byte x g(R) x bytes``.

    A cold call follows some computing, as a training step's all-reduce follows its backward pass;
    ``warm`` is the same transport fitted to calls made at once after another (None: as cold).
    """

    algorithm: str
    alpha_s: float
    beta_s_per_byte: float
    max_call_bytes: int | None = None  # larger tensors go in several calls (shm: one slot)
    warm: Transport | None = None

    def calls(self, size: int) -> int:
        return 1 if self.max_call_bytes is None else max(1, math.ceil(size / self.max_call_bytes))

    def seconds(self, ranks: int, size: int, warm: bool = False) -> float:
        if warm and self.warm is not None:
            return self.warm.seconds(ranks, size)
        f, g = TRANSPORT_ALGORITHMS[self.algorithm][1](ranks)
        return self.alpha_s * f * self.calls(size) + self.beta_s_per_byte * g * size


def fit_transport(algorithm: str, points: list[tuple[int, int, float]],
                  max_call_bytes: int | None = None) -> tuple[Transport, float]:
    """alpha and beta for ``points`` of (ranks, bytes, seconds per call), and the rms relative error of the fit."""
    shape = TRANSPORT_ALGORITHMS[algorithm][1]
    calls = Transport(algorithm, 0.0, 0.0, max_call_bytes).calls
    terms = np.array([[shape(r)[0] * calls(n), shape(r)[1] * n] for r, n, _ in points])
    seconds = np.array([s for _, _, s in points])
    weighted = terms / seconds[:, None]  # relative errors: the small sizes count as much as the large ones
    coefficients = np.linalg.lstsq(weighted, np.ones(len(points)), rcond=None)[0]
    if (coefficients < 0).any():  # one term alone, the other at zero: whichever fits better
        single = [np.where(np.arange(2) == keep, max(0.0, np.linalg.lstsq(weighted[:, [keep]], np.ones(len(points)),
                                                                          rcond=None)[0][0]), 0.0) for keep in (0, 1)]
        coefficients = min(single, key=lambda c: np.sum((weighted @ c - 1) ** 2))
    residual = weighted @ coefficients - 1
    fitted = Transport(algorithm, float(coefficients[0]), float(coefficients[1]), max_call_bytes)
    return fitted, float(np.sqrt(np.mean(residual ** 2)))


def ddp_buckets(sizes: list[int], cap_bytes: int, first_bytes: int = FIRST_BUCKET_BYTES) -> list[list[int]]:
    """The parameters (indices into ``sizes``, bytes each, in ``parameters()`` order) of each DDP bucket.

    DDP fills buckets in reverse parameter order (about the order the backward pass makes the
    gradients) and closes one as soon as it holds its limit: ``first_bytes``, then ``cap_bytes``.
    """
    buckets, current, total = [], [], 0
    for index in reversed(range(len(sizes))):
        current.append(index)
        total += sizes[index]
        if total >= (first_bytes if not buckets else cap_bytes):
            buckets.append(current)
            current, total = [], 0
    return buckets + ([current] if current else [])


def int8_payload_bytes(size: int) -> int:
    """Bytes the int8 hook gathers from each rank for a float32 bucket of ``size`` bytes: codes and scales."""
    blocks = math.ceil(size / 4 / INT8_BLOCK)
    return blocks * INT8_BLOCK + 4 * blocks


def powersgd_bytes(shapes: list[tuple[int, ...]], rank: int) -> tuple[int, int, int]:
    """Float32 bytes PowerSGD all-reduces for these gradient shapes: uncompressed tensors, P factors, Q factors.

    torch's ``powerSGD_hook`` views each gradient as ``shape[0] x rest`` and compresses it when
    ``(rows + cols) x r x 2 < rows x cols`` (its ``min_compression_rate``).
    """
    uncompressed = ps = qs = 0
    for shape in shapes:
        rows = shape[0] if shape else 1
        columns = math.prod(shape) // rows
        r = min(rows, columns, rank)
        if (rows + columns) * r * POWERSGD_MIN_COMPRESSION_RATE < rows * columns:
            ps, qs = ps + rows * r, qs + columns * r
        else:
            uncompressed += rows * columns
    return 4 * uncompressed, 4 * ps, 4 * qs


@dataclass(frozen=True)
class PolicyCost:
    """One policy kind's measured costs (seconds), with its gradient shapes."""

    batch: int  # windows per rank per micro-step
    data_s: float  # data wait per micro-step, one process alone on its host
    compute_s: float  # forward, backward and optimiser step per micro-step, alone
    shapes: tuple[tuple[int, ...], ...]  # trainable parameters, in parameters() order
    shared_data_s: float | None = None  # with every core of the host training (None: as alone)
    shared_compute_s: float | None = None
    step_times_s: tuple[float, ...] = ()  # data + compute of single steps on a shared host (no spread: no wait)
    bucket_cap_bytes: int = 25 << 20
    int8_codec_s: float = 0.0  # what the int8 hook adds to a step on one rank
    powersgd_codec_s: float = 0.0  # what the PowerSGD hook adds to a step on one rank
    powersgd_rank: int = 2

    def buckets(self) -> list[list[tuple[int, ...]]]:
        """The gradient shapes of each DDP bucket."""
        sizes = [4 * math.prod(shape) for shape in self.shapes]
        return [[self.shapes[i] for i in bucket] for bucket in ddp_buckets(sizes, self.bucket_cap_bytes)]

    def bucket_bytes(self) -> list[int]:
        return [4 * sum(map(math.prod, bucket)) for bucket in self.buckets()]

    @property
    def gradient_bytes(self) -> int:
        return sum(4 * math.prod(shape) for shape in self.shapes)


@dataclass(frozen=True)
class Setting:
    """How gradients travel: a ``--comm-hook`` (shm, ring, none, int8 or powersgd) and ``--grad-accum``."""

    hook: str
    grad_accum: int = 1


def straggler_s(step_times: tuple[float, ...], ranks: int) -> float:
    """E[max of ``ranks`` draws] - E[one draw] from the empirical distribution of ``step_times``."""
    if ranks == 1 or not step_times:
        return 0.0
    ordered = np.sort(np.asarray(step_times))
    below = np.arange(len(ordered) + 1) / len(ordered)  # P(draw <= ordered[i]) = below[i + 1]
    weights = below[1:] ** ranks - below[:-1] ** ranks  # P(the maximum of the draws is ordered[i])
    return float(weights @ ordered - ordered.mean())


def transfer_s(cost: PolicyCost, setting: Setting, ranks: int, transports: dict[str, Transport]) -> float:
    """The gradients' all-reduce in one optimiser step, with the hook's own work (see the module docstring)."""
    transport = transports[HOOK_TRANSPORT[setting.hook]]
    if setting.hook == "int8":
        return cost.int8_codec_s + sum(transport.seconds(ranks, int8_payload_bytes(size))
                                       for size in cost.bucket_bytes())
    if setting.hook == "powersgd":
        sends = [[size for size in powersgd_bytes(bucket, cost.powersgd_rank) if size] for bucket in cost.buckets()]
        return cost.powersgd_codec_s + sum(transport.seconds(ranks, size, warm=index > 0) for sizes in sends
                                           for index, size in enumerate(sizes))
    return sum(transport.seconds(ranks, size) for size in cost.bucket_bytes())


def predict(cost: PolicyCost, setting: Setting, ranks: int, transports: dict[str, Transport]) -> dict[str, float]:
    """Step time, its straggler wait and transfer, exposed communication (their sum), samples/s and sync
    efficiency of ``ranks`` ranks."""
    k, shared = setting.grad_accum, ranks > 1
    data = cost.shared_data_s if shared and cost.shared_data_s is not None else cost.data_s
    compute = cost.shared_compute_s if shared and cost.shared_compute_s is not None else cost.compute_s
    wait = straggler_s(cost.step_times_s, ranks) * math.sqrt(k)
    transfer = transfer_s(cost, setting, ranks, transports)
    step = k * (data + compute) + wait + transfer
    return {"step_s": step, "wait_s": wait, "transfer_s": transfer, "communication_s": wait + transfer,
            "samples_per_s": ranks * k * cost.batch / step,
            "sync_efficiency": k * compute / (k * compute + wait + transfer)}


def one_rank_rate(cost: PolicyCost) -> float:
    """Samples/s of one rank with no DDP: the baseline every speedup is measured against."""
    return cost.batch / (cost.data_s + cost.compute_s)


def scaling_limit(curve: dict[int, dict[str, float]], min_efficiency: float = 0.5,
                  min_gain: float = 0.1) -> dict | None:
    """Where a curve ({ranks: {speedup, sync_efficiency}} at powers of two) stops scaling: the first rank
    count whose sync efficiency is under ``min_efficiency`` or whose speedup gains under ``min_gain`` over
    half as many ranks; None when no rank count of the curve does."""
    ranks = sorted(curve)
    for previous, current in zip(ranks, ranks[1:]):
        gain = curve[current]["speedup"] / curve[previous]["speedup"] - 1
        if curve[current]["sync_efficiency"] < min_efficiency:
            return {"ranks": current, "reason": f"sync efficiency {curve[current]['sync_efficiency']:.2f}"}
        if gain < min_gain:
            return {"ranks": current, "reason": f"speedup {gain:+.0%} over {previous} rank{'s' * (previous > 1)}"}
    return None


def break_even_bandwidth(gradient_bytes: int, compute_s: float) -> float:
    """Bytes/s a ring all-reduce must reach, latency aside, for sync efficiency 0.5 at many ranks
    (its 2(R-1)/R x bytes on the wire taking as long as the compute)."""
    return 2 * gradient_bytes / compute_s
