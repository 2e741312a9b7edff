"""What one gloo collective costs between 2 ranks on this machine, with nothing else running,
and what our own CPU all-reduces (shared memory, socket ring) cost beside it.

With gloo's all-reduce, train_speed's 2-rank runs lost a third or more of their step to
exposed communication (docs/training.md, Speed). This separates the collective's own
cost from waiting for the other rank: two processes under torchrun, idle apart from the
collective, time each of ``--iterations`` calls of each operation (after a warm-up), for a tiny tensor and for
one the size of the default mlp's gradients (~100 k float32):

- ``all_reduce``: what DDP calls for every gradient bucket;
- ``exchange``: each rank ``isend``s its tensor to the other and ``irecv``s the other's
  (``batch_isend_irecv``), then adds: the same sum for 2 ranks, built from point-to-point;
- ``all_gather``, ``broadcast`` and ``barrier``, for scale;
- ``shm``: ``train.comm.shm_all_reduce.SharedMemoryAllReduce.all_reduce_``, the transport of
  bc.py's default comm hook between CPU ranks on one host (``shm``), which the training
  thread runs itself (left out where the ranks cannot share memory);
- ``ring``: ``train.comm.socket_ring.SocketRing.all_reduce_``, the transport of the ``ring``
  comm hook (the default across hosts), also run by the training thread.

It reports the mean, median and 90th percentile of the calls (rank 0's, pooled over
``--rounds`` rounds): a mean far above the median means a few calls wait much longer
than the rest. Where this user may use the real-time scheduler (``chrt --fifo``: root
or CAP_SYS_NICE) the job runs a second time under it, side by side: its threads then
run the moment they are woken, so the difference is what the operating system's
scheduler adds. ``--no-realtime`` skips that run. Writes
benchmarks/results/gloo_latency.json and a row per scheduler and size in
benchmarks/README.md.

    python -m benchmarks.gloo_latency [--iterations 300] [--rounds 3] [--no-realtime]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from benchmarks.common import TORCHRUN_ENV, benchmark_parser, machine_facts, publish, python_command, realtime_permitted
from train.comm.shm_all_reduce import SharedMemoryAllReduce
from train.comm.socket_ring import SocketRing

SIZES = {"10 floats": 10, "mlp gradients (100k floats)": 100_000}
SCALE_OPERATIONS = ("all_gather", "broadcast", "barrier")  # the table gives only their mean
OPERATIONS = ("all_reduce", "exchange", *SCALE_OPERATIONS, "ring", "shm")  # shm where the ranks share memory


def collectives(tensor: torch.Tensor, ring: SocketRing, shared: SharedMemoryAllReduce | None) -> dict:
    """One call of each operation on ``tensor`` (this process is rank 0 or 1 of 2); ``shm`` where ``shared``."""
    peer = 1 - dist.get_rank()
    received = torch.empty_like(tensor)
    gathered = tensor.new_empty(2 * tensor.numel())

    def exchange():
        pair = [dist.P2POp(dist.isend, tensor, peer), dist.P2POp(dist.irecv, received, peer)]
        for request in dist.batch_isend_irecv(pair):
            request.wait()
        tensor.add_(received)

    return {"all_reduce": lambda: dist.all_reduce(tensor), "exchange": exchange,
            "all_gather": lambda: dist.all_gather_into_tensor(gathered, tensor),
            "broadcast": lambda: dist.broadcast(tensor, 0), "barrier": dist.barrier,
            "ring": lambda: ring.all_reduce_(tensor)} | ({"shm": lambda: shared.all_reduce_(tensor)} if shared else {})


def measure_ranks(iterations: int, rounds: int, out: Path) -> None:
    """The body of each torchrun rank: rank 0 writes ``{size: {operation: {mean, median, p90}}}`` (ms) to ``out``."""
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    ring, shared = SocketRing(), SharedMemoryAllReduce.connect(4 * max(SIZES.values()))
    milliseconds = {}
    for size_name, size in SIZES.items():
        calls = collectives(torch.zeros(size), ring, shared)  # zeros: the sums stay 0
        durations = {operation: [] for operation in calls}
        for _ in range(rounds):
            for operation, call in calls.items():
                for _ in range(20):
                    call()
                dist.barrier()
                for _ in range(iterations):
                    start = time.perf_counter()
                    call()
                    durations[operation].append((time.perf_counter() - start) * 1e3)
        milliseconds[size_name] = {operation: call_statistics(values) for operation, values in durations.items()}
    if dist.get_rank() == 0:
        out.write_text(json.dumps(milliseconds))
    dist.destroy_process_group()


def call_statistics(milliseconds: list[float]) -> dict:
    """Mean, median and 90th percentile of the calls' durations."""
    ordered = sorted(milliseconds)
    return {"mean": round(statistics.fmean(ordered), 3), "median": round(statistics.median(ordered), 3),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3)}


def run_ranks(iterations: int, rounds: int, realtime: bool) -> dict:
    """The 2-rank job under torchrun (under ``chrt --fifo`` when ``realtime``): rank 0's figures."""
    with tempfile.TemporaryDirectory(prefix="robofleet-gloo-") as scratch:
        out = Path(scratch) / "milliseconds.json"
        command = [*python_command(2, realtime=realtime), "-m", "benchmarks.gloo_latency", "--rank-body",
                   str(iterations), str(rounds), str(out)]
        completed = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **TORCHRUN_ENV},
                                   cwd=Path(__file__).resolve().parent.parent)
        if completed.returncode != 0:
            raise RuntimeError(f"the 2-rank probe failed:\n{completed.stderr[-3000:]}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--iterations", type=int, default=300, help="calls timed per operation and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-realtime", action="store_true", help="skip the run under the real-time scheduler")
    args = parser.parse_args(argv)

    schedulers = {"normal": False}
    if not args.no_realtime and realtime_permitted():
        schedulers["fifo"] = True
    milliseconds = {scheduler: run_ranks(args.iterations, args.rounds, realtime)
                    for scheduler, realtime in schedulers.items()}

    machine = machine_facts()
    result = {"benchmark": "gloo_latency", "machine": machine,
              "job": {"iterations": args.iterations, "rounds": args.rounds, "ranks": 2, "backend": "gloo",
                      "schedulers": list(schedulers)},
              "milliseconds_per_call": milliseconds}
    header = ["date", "code", "scheduler", "tensor", "all_reduce ms (mean / median / p90)",
              "exchange ms (mean / median / p90)", *(f"{operation} ms" for operation in SCALE_OPERATIONS),
              "all_reduce / exchange", "ring ms (mean / median / p90)", "all_reduce / ring",
              "shm ms (mean / median / p90)", "all_reduce / shm"]

    def spread(figures: dict) -> str:
        return f"{figures['mean']} / {figures['median']} / {figures['p90']}"

    rows = [[machine["date"], machine["code_version"], scheduler, size, spread(times["all_reduce"]),
             spread(times["exchange"]), *(times[operation]["mean"] for operation in SCALE_OPERATIONS),
             f"{times['all_reduce']['mean'] / times['exchange']['mean']:.1f}", spread(times["ring"]),
             f"{times['all_reduce']['mean'] / times['ring']['mean']:.1f}",
             *((spread(times["shm"]), f"{times['all_reduce']['mean'] / times['shm']['mean']:.1f}") if "shm" in times
               else ("–", "–"))]
            for scheduler, by_size in milliseconds.items() for size, times in by_size.items()]
    publish("gloo_latency", result, header, rows, args)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank-body"]:  # one rank of the torchrun job that main() starts
        measure_ranks(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
    else:
        main()
