"""How close training runs to the machine's limit: FLOPs of a training step, matmul peaks and MFU.

``step_flops`` counts a step's forward and backward FLOPs with torch's ``FlopCounterMode``
(matrix products and convolutions; element-wise work is not counted, as in every MFU).
``matmul_peak`` is what the machine gives a square matmul of one dtype on a number of
threads, the ceiling those FLOPs are held against:

    MFU = FLOPs per sample x samples/s / matmul peak of the dtype trained in
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from train.precision import cpu_bf16_units

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def step_flops(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """FLOPs of one training step of ``model`` (whose forward returns the loss) on ``batch``: ``forward``,
    ``backward``, ``total`` and the convolutions' share of the total. The gradients are cleared after."""
    with FlopCounterMode(display=False) as forward:
        loss = model(batch)
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    model.zero_grad(set_to_none=True)
    counts = [mode.get_flop_counts()["Global"] for mode in (forward, backward)]
    convolutions = sum(flops for ops in counts for op, flops in ops.items() if "convolution" in str(op))
    total = forward.get_total_flops() + backward.get_total_flops()
    return {"forward": forward.get_total_flops(), "backward": backward.get_total_flops(), "total": total,
            "convolution_share": convolutions / total if total else 0.0}


def matmul_peak(dtype: str, threads: int, seconds: float = 1.0, side: int = 2048) -> dict[str, float]:
    """GFLOP/s of ``side`` x ``side`` matmuls of ``dtype`` (``fp32``, ``bf16``) on ``threads`` torch threads,
    repeated for about ``seconds`` after one warm-up product.

    The side is the largest power of two up to ``side`` whose product takes at most a quarter of
    ``seconds``: a CPU without bfloat16 hardware emulates bf16 10-50x slower, where one 2048 product
    would take many seconds.
    Returns ``gflops`` and the ``side`` used; torch's thread count is restored after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        size = 128
        while True:
            a = torch.randn(size, size, dtype=DTYPES[dtype])
            a @ a  # the warm-up (the first also starts the thread pool)
            if size >= side or timed(lambda: a @ a) * 8 > seconds / 4:  # doubling the side costs 8x
                break
            size *= 2
        products, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ a
            products += 1
        elapsed = time.perf_counter() - start
    finally:
        torch.set_num_threads(previous)
    return {"gflops": 2 * size ** 3 * products / elapsed / 1e9, "side": size}


def timed(work) -> float:
    """Seconds one call of ``work`` takes."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def machine_peaks(thread_counts: tuple[int, ...], seconds: float = 1.0) -> dict[str, dict[str, dict]]:
    """``matmul_peak`` of fp32 and bf16 on each of ``thread_counts``: {dtype: {threads (str): peak}}."""
    return {dtype: {str(threads): matmul_peak(dtype, threads, seconds) for threads in thread_counts}
            for dtype in DTYPES}


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """What the CPU offers matmuls: torch's kernel level (``get_cpu_capability``) and the bfloat16 units seen
    (train/precision.py's reading of the CPU flags, which ``--amp auto`` decides by)."""
    seen = list(cpu_bf16_units(cpuinfo))
    return {"torch_capability": torch.backends.cpu.get_cpu_capability(), "bf16_flags": seen,
            "bf16_hardware": bool(seen)}


def mfu(flops_per_sample: float, samples_per_s: float, peak_gflops: float) -> dict[str, float]:
    """Achieved GFLOP/s (``flops_per_sample`` x ``samples_per_s``) and its share of ``peak_gflops`` (MFU)."""
    achieved = flops_per_sample * samples_per_s / 1e9
    return {"gflops": achieved, "mfu": achieved / peak_gflops}


def utilisation(rounds: list[dict], peaks: list[dict], flops_per_sample: float, threads: dict[str, int]) -> dict:
    """Each setup's ``mfu`` in every round against that round's peak (``machine_peaks``) of the dtype it trained
    in (its ``amp``: bf16, else fp32) on ``threads[setup]`` threads: the best round's GFLOP/s and the median MFU."""
    result = {}
    for name, count in threads.items():
        dtype = "bf16" if rounds[0][name].get("amp") == "bf16" else "fp32"
        measured = [mfu(flops_per_sample, r[name]["samples_per_s"], p[dtype][str(count)]["gflops"])
                    for r, p in zip(rounds, peaks)]
        result[name] = {"dtype": dtype, "peak_threads": count, "gflops": round(max(m["gflops"] for m in measured), 2),
                        "mfu": round(statistics.median(m["mfu"] for m in measured), 4)}
    return result
