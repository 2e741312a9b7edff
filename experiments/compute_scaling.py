"""Compute scaling: how train/bc.py's DDP training would scale from 1 to 64 ranks, from a model of one step
calibrated on this machine and checked against every rank count it can run.

    .venv/bin/python -m experiments.compute_scaling                  # measure, fit, predict (~20 min, 2 quiet cores)
    .venv/bin/python -m experiments.compute_scaling --skip-measure   # refit and redraw from the recorded measurements
    .venv/bin/python -m experiments.compute_scaling --skip-measure --retime-transports   # and time the transports anew

The model (experiments/step_model.py) is step time = k x (data + compute) + wait(R) + transfer(R):
the straggler wait of R ranks meeting at every step, and the all-reduce of the gradient bytes,
costed per transport as alpha x f(R) + beta x g(R) x bytes.
This script:

1. collects a fleet (``--robots`` x ``--episodes`` of ``--task``) unless ``--data`` names one;
2. times the transports between 2 ranks under torchrun, for each of ``--sweep-floats`` float32
   tensors (the operations of benchmarks/gloo_latency.py, mean of the calls): gloo's all_reduce,
   the socket ring, shared memory, and the int8 hook's exchange of codes (``int8_exchange``); and
   fits alpha and beta to each. Each cold call follows ``--sweep-gap-ms`` of matrix products, as
   a training step's all-reduce follows its backward pass (back to back, gloo found its threads
   awake and its data cached: the mlp's all-reduce timed several times cheaper than it costs in
   training). A warm call follows each cold one at once, as PowerSGD's second and third
   all-reduce follow its first, and gets its own fit;
3. trains each of ``--policies`` with bc.py for a short run per setup (``runs``), one thread per
   rank, and reads its RUN/metrics.jsonl over the steps after the first log window.
   Calibration: one process without DDP (data wait and compute alone on the host); two such
   processes at once, logging every step (data wait and compute on a host whose every core
   trains, and the spread of single steps behind the straggler wait); one rank under DDP with
   the int8 and with the PowerSGD hook (their codec cost). Checks: one rank under DDP, two ranks
   with the shm hook (bc.py's default on one host), with ``--grad-accum``, with gloo, int8 and
   PowerSGD, and two torchrun agents (``--nnodes=2``, c10d rendezvous on 127.0.0.1) joined by the
   socket ring. Each setup runs ``--rounds`` times; the fastest counts;
4. predicts samples/s, speedup over one process and sync efficiency for 1 to ``--max-ranks`` ranks
   per policy and setting, says where each stops scaling (sync efficiency under 0.5, or under 10%
   more speedup per doubling) and compares every check with its prediction;
5. reads the GPU figures of ``--gpu-results`` (benchmarks/gpu_paths.py): one rank per run, so no
   nccl fit, only the break-even bandwidth and the one-rank DDP checks (experiments/compute_scaling_gpu.py).

Writes ``--results-dir``/compute_scaling.json (the raw measurements too: ``--skip-measure`` refits
from them), the chart ``--plot`` and the section ``scaling_compute`` of ``--docs``. Run it with
nothing else on the machine: two ranks share the cores with whatever else runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import sim  # noqa: F401  (first: headless rendering before mujoco loads)

import torch
import torch.distributed as dist

from benchmarks.common import TORCHRUN_ENV, agent_command, machine_facts, python_command, write_results
from benchmarks.gloo_latency import call_statistics, collectives
from benchmarks.train_speed import window_figures
from collect import CollectConfig
from collect.engine import run_collection
from core.errors import fail
from core.files import REPO, repo_relative
from core.options import check_options, parse_config
from experiments.compute_scaling_report import report
from experiments.render import write
from experiments.step_model import int8_payload_bytes
from train.checkpoint import load_policy
from train.comm.compression import dequantize_int8, quantize_int8
from train.comm.shm_all_reduce import MAX_SLOT_BYTES, SharedMemoryAllReduce
from train.comm.socket_ring import SocketRing
from train.monitor import read_records

POLICIES = ("mlp", "act", "diffusion")
# sweep operation (gloo_latency's name): transport (experiments/step_model.py)
SWEEP = {"all_reduce": "gloo", "int8_exchange": "int8_exchange", "ring": "ring", "shm": "shm"}


class Run(NamedTuple):
    """One bc.py setup: ``plain`` (one process, no DDP), ``pair`` (two plain processes at once, logging
    every step), ``standalone`` (torchrun on one host) or ``loopback`` (one torchrun agent per rank, c10d
    rendezvous on 127.0.0.1)."""

    launch: str
    ranks: int
    hook: str  # --comm-hook (ignored by a plain run)
    grad_accum: int
    role: str  # calibration or check


def runs(grad_accum: int) -> dict[str, Run]:
    return {
        "1 process": Run("plain", 1, "none", 1, "calibration"),
        "2 processes": Run("pair", 1, "none", 1, "calibration"),
        "1 rank, int8": Run("standalone", 1, "int8", 1, "calibration"),
        "1 rank, powersgd": Run("standalone", 1, "powersgd", 1, "calibration"),
        "1 rank": Run("standalone", 1, "shm", 1, "check"),
        "2 ranks": Run("standalone", 2, "shm", 1, "check"),
        f"2 ranks, grad-accum {grad_accum}": Run("standalone", 2, "shm", grad_accum, "check"),
        "2 ranks, gloo": Run("standalone", 2, "none", 1, "check"),
        "2 ranks, int8": Run("standalone", 2, "int8", 1, "check"),
        "2 ranks, powersgd": Run("standalone", 2, "powersgd", 1, "check"),
        "2 agents on loopback, ring": Run("loopback", 2, "ring", 1, "check"),
    }


@dataclass
class ScalingConfig:
    out: str = field(default="runs/compute_scaling", metadata={"help": "directory for the fleet, runs and logs"})
    data: str = field(default="", metadata={"help": "an existing fleet store (default: collect one into OUT/fleet)"})
    robots: int = field(default=20, metadata={"help": "fleet size when collecting"})
    episodes: int = field(default=10, metadata={"help": "episodes per robot when collecting"})
    task: str = field(default="pick_place", metadata={"help": "task when collecting"})
    policies: tuple[str, ...] = field(default=POLICIES, metadata={"help": "policy kinds (act and diffusion: small)"})
    mlp_batch: int = field(default=512, metadata={"help": "mlp windows per rank per micro-step (bc.py's default)"})
    lerobot_batch: int = field(default=64, metadata={"help": "act and diffusion windows per rank per micro-step"})
    steps: int = field(default=300, metadata={"help": "optimiser steps of each mlp run"})
    log_interval: int = field(default=50, metadata={"help": "steps per measured window of the mlp runs"})
    lerobot_steps: int = field(default=60, metadata={"help": "optimiser steps of each act and diffusion run"})
    lerobot_log_interval: int = field(default=20, metadata={"help": "steps per window of the act and diffusion runs"})
    grad_accum: int = field(default=4, metadata={"help": "--grad-accum of the accumulating setups"})
    powersgd_rank: int = field(default=2, metadata={"help": "--powersgd-rank"})
    bucket_cap_mb: float = field(default=25.0, metadata={"help": "--bucket-cap-mb"})
    rounds: int = field(default=2, metadata={"help": "times each bc.py setup runs (the fastest counts)"})
    sweep_floats: tuple[int, ...] = field(default=(16, 1024, 16384, 131072, 524288, 1048576, 2097152), metadata={
        "help": "float32 tensor sizes the transports are timed at (the fits hold between them: keep the policies' "
                "buckets inside)"})
    sweep_seconds: float = field(default=2.0, metadata={"help": "seconds of calls timed per operation and size"})
    sweep_iterations: int = field(default=800, metadata={
        "help": "most calls timed per operation and size (gloo's slowest tenth of calls sets its mean)"})
    sweep_gap_ms: float = field(default=5.0, metadata={
        "help": "ms of matrix products before each timed call, as a training step computes between its all-reduces"})
    max_ranks: int = field(default=64, metadata={"help": "predict up to this many ranks"})
    skip_measure: bool = field(default=False, metadata={"help": "refit from --measurements instead of measuring"})
    measurements: str = field(default="", metadata={
        "help": "compute_scaling.json whose measurements --skip-measure reuses (default: RESULTS_DIR's)"})
    retime_transports: bool = field(default=False, metadata={
        "help": "with --skip-measure: time the transports anew (~1 min), keep the recorded training runs"})
    gpu_results: str = field(default="benchmarks/results/gpu_paths.json", metadata={"help": "recorded GPU figures"})
    docs: str = field(default="docs/scaling.md", metadata={"help": "markdown file for the section"})
    plot: str = field(default="docs/media/compute_scaling.png", metadata={"help": "the scaling chart (PNG)"})
    results_dir: str = field(default="experiments/results", metadata={"help": "where compute_scaling.json goes"})

    def __post_init__(self):
        self.policies, self.sweep_floats = tuple(self.policies), tuple(self.sweep_floats)
        if not self.policies or not set(self.policies) <= set(POLICIES):
            raise ValueError(f"--policies must be among {', '.join(POLICIES)}, got {' '.join(self.policies)}")
        check_options(self, ("robots", "episodes", "mlp_batch", "lerobot_batch", "grad_accum", "powersgd_rank",
                             "rounds", "sweep_iterations"), lambda value: value >= 1, "must be at least 1")
        check_options(self, ("steps", "lerobot_steps"), lambda value: value >= 2, "must be at least 2")
        check_options(self, ("max_ranks",), lambda value: value >= 2, "must be at least 2")
        check_options(self, ("sweep_seconds", "bucket_cap_mb"), lambda value: value > 0, "must be positive")
        check_options(self, ("sweep_gap_ms",), lambda value: value >= 0, "must be 0 or more")
        if self.retime_transports and not self.skip_measure:
            raise ValueError("--retime-transports goes with --skip-measure (without it every transport is timed)")
        if len(self.sweep_floats) < 2 or min(self.sweep_floats) < 1:
            raise ValueError("--sweep-floats needs two sizes or more, each at least 1")
        for steps, interval in ((self.steps, self.log_interval), (self.lerobot_steps, self.lerobot_log_interval)):
            if not 1 <= interval < steps:
                raise ValueError(f"a log interval must leave a window after the first: {interval} of {steps} steps")


# ----- transports -----------------------------------------------------------------------------------------------


def compute_for(seconds: float, matrix: torch.Tensor) -> None:
    """Matrix products for ``seconds``: between two timed calls the transport's threads idle and its data
    leaves the caches, as in a training step (back to back, every call would find them warm)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        matrix @ matrix


def timed_seconds(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def int8_exchange(tensor: torch.Tensor):
    """One call of what the int8 hook adds per bucket from a second rank on: the all-gather of every rank's
    codes and scales, and dequantising the other ranks' rows into the sum (quantising and the own row are
    its codec, which the 1-rank run measures)."""
    codes, scales = quantize_int8(tensor)
    payload = torch.cat([codes, scales.view(torch.int8)])
    rank, ranks = dist.get_rank(), dist.get_world_size()
    gathered, total = payload.new_empty(ranks * payload.numel()), torch.zeros_like(tensor)

    def call():
        dist.all_gather_into_tensor(gathered, payload)
        for other, row in enumerate(gathered.view(ranks, -1)):
            if other != rank:
                total.add_(dequantize_int8(row[: len(codes)], row[len(codes):].view(torch.float32), total))

    return call


def sweep_ranks(floats: list[int], seconds: float, iterations: int, gap_ms: float, out: Path) -> None:
    """The body of each torchrun rank: rank 0 writes {transport: [[ranks, bytes, mean s, median s, warm mean s,
    warm median s], ...]} to ``out``. Each cold call follows ``gap_ms`` of computing; a warm call follows it at once."""
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    matrix = torch.randn(128, 128)
    ring, shared = SocketRing(), SharedMemoryAllReduce.connect(min(4 * max(floats), MAX_SLOT_BYTES))
    points = {transport: [] for operation, transport in SWEEP.items() if operation != "shm" or shared}
    for size in floats:
        calls = collectives(torch.zeros(size), ring, shared) | {"int8_exchange": int8_exchange(torch.randn(size))}
        for operation in (operation for operation in SWEEP if operation in calls):
            call = calls[operation]
            started = time.perf_counter()
            for _ in range(3):
                call()
            count = torch.tensor([min(iterations, max(5, int(seconds * 3 / (time.perf_counter() - started))))])
            dist.broadcast(count, 0)  # every rank makes the same calls
            dist.barrier()
            cold, warm = [], []
            for _ in range(int(count)):
                compute_for(gap_ms / 1e3, matrix)
                cold.append(timed_seconds(call) * 1e3)
                warm.append(timed_seconds(call) * 1e3)
            figures = [call_statistics(durations)[key] / 1e3 for durations in (cold, warm)
                       for key in ("mean", "median")]
            sent = int8_payload_bytes(4 * size) if operation == "int8_exchange" else 4 * size
            points[SWEEP[operation]].append([2, sent, *figures])
    if dist.get_rank() == 0:
        out.write_text(json.dumps(points))
    dist.destroy_process_group()


def measure_transports(config: ScalingConfig, out: Path) -> dict:
    """``sweep_ranks`` on 2 ranks under torchrun: rank 0's points."""
    points = out / "transports.json"
    body = json.dumps([list(config.sweep_floats), config.sweep_seconds, config.sweep_iterations, config.sweep_gap_ms])
    command = [*python_command(2), "-m", "experiments.compute_scaling", "--rank-body", body, str(points)]
    completed = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **TORCHRUN_ENV}, cwd=REPO)
    if completed.returncode != 0:
        fail(f"the 2-rank transport sweep failed:\n{completed.stderr[-3000:]}", code=1)
    return json.loads(points.read_text())


# ----- training runs ----------------------------------------------------------------------------------------------


def launchers(run: Run) -> list[list[str]]:
    """The command start of each process ``run`` needs (one, or one torchrun agent per rank)."""
    if run.launch in ("plain", "pair"):
        return [[sys.executable]] * (2 if run.launch == "pair" else 1)
    if run.launch == "standalone":
        return [python_command(run.ranks, torchrun=True)]
    return [agent_command(run.ranks, "compute-scaling")] * run.ranks


def batch_size(config: ScalingConfig, policy: str) -> int:
    return config.mlp_batch if policy == "mlp" else config.lerobot_batch


def policy_options(config: ScalingConfig, policy: str) -> tuple[list[str], int, int]:
    """bc.py's policy options, and the steps and log interval of its runs."""
    options = ["--policy", policy, "--batch-size", str(batch_size(config, policy))]
    if policy == "mlp":
        return options, config.steps, config.log_interval
    return [*options, "--lerobot-config", "small"], config.lerobot_steps, config.lerobot_log_interval


def train(config: ScalingConfig, data: Path, policy: str, run: Run, out: Path) -> dict:
    """One bc.py run of ``run``'s setup: its figures over the steps after the first log window (summed over
    the processes of a ``pair``), the steps they cover (summed too) and, for a ``pair``, each step's data wait
    + compute."""
    options, steps, interval = policy_options(config, policy)
    outs = [out / str(index) for index in range(2)] if run.launch == "pair" else [out]

    def arguments(run_out: Path) -> list[str]:
        return [str(REPO / "train" / "bc.py"), "--data", str(data), "--out", str(run_out), "--max-steps", str(steps),
                "--log-interval", str(1 if run.launch == "pair" else interval), "--checkpoint-interval", str(steps),
                "--threads", "1", "--no-resume", "--val-fraction", "0",
                "--warmup-steps", str(interval),  # PowerSGD compresses after the warmup: in every measured step
                "--comm-hook", run.hook, "--grad-accum", str(run.grad_accum), "--powersgd-rank",
                str(config.powersgd_rank), "--bucket-cap-mb", str(config.bucket_cap_mb), *options]

    out.mkdir(parents=True, exist_ok=True)
    commands = [[*launcher, *arguments(outs[index % len(outs)])] for index, launcher in enumerate(launchers(run))]
    logs = [out / f"process{index}.log" for index in range(len(commands))]
    jobs = [subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=REPO,
                             env={**os.environ, **TORCHRUN_ENV}) for command, log in zip(commands, logs)]
    try:
        codes = [job.wait() for job in jobs]
    finally:  # one agent failing leaves the other waiting at the rendezvous
        for job in jobs:
            if job.poll() is None:
                job.kill()
                job.wait()
    failed = next((index for index, code in enumerate(codes) if code), None)
    if failed is not None:
        fail(f"bc.py failed ({policy}, {run}); its output is in {logs[failed]}", code=1)
    windows = [[record for record in read_records(run_out / "metrics.jsonl")
                if "samples_per_s" in record and record["step"] > interval] for run_out in outs]
    figures = {"steps": (steps - interval) * len(outs), **window_figures(windows)}
    if run.launch == "pair":
        figures["step_times_s"] = [round(w["data_wait_s"] + w["compute_s"], 7) for pair in windows for w in pair]
    return figures


def measure_policies(config: ScalingConfig, data: Path, out: Path) -> dict:
    """Every policy's every setup of ``runs``, ``--rounds`` times (rounds outermost: the machine drifts);
    the fastest of each, and the policy's gradient shapes."""
    setups = runs(config.grad_accum)
    rounds = {policy: {name: [] for name in setups} for policy in config.policies}
    for round_index in range(config.rounds):
        for policy in config.policies:
            for name, run in setups.items():
                figures = train(config, data, policy, run, out / policy / name.replace(" ", "_").replace(",", ""))
                rounds[policy][name].append(figures)
                print(f"round {round_index + 1}: {policy}, {name}: {figures['samples_per_s']:.0f} samples/s, "
                      f"sync efficiency {figures['sync_efficiency']:.2f}", flush=True)
    measured = {}
    for policy in config.policies:
        module, _ = load_policy(out / policy / "1_process")
        shapes = [list(p.shape) for p in module.parameters() if p.requires_grad]
        measured[policy] = {
            "batch": batch_size(config, policy), "shapes": shapes,
            "runs": {name: {**setups[name]._asdict(), **max(figures, key=lambda f: f["samples_per_s"]),
                            "rounds_samples_per_s": [f["samples_per_s"] for f in figures]}
                     for name, figures in rounds[policy].items()}}
    return measured


def measure(config: ScalingConfig, command: str) -> dict:
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(config.data) if config.data else out / "fleet"
    if not config.data:
        run_collection(CollectConfig(robots=config.robots, episodes=config.episodes, task=config.task, out=str(data),
                                     quiet=True))
    transports = measure_transports(config, out)
    print("transports: " + ", ".join(f"{name} ({len(points)} sizes)" for name, points in transports.items()))
    return {"machine": machine_facts(), "command": command, "data": repo_relative(data), "transports": transports,
            "policies": measure_policies(config, data, out)}


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(ScalingConfig, __doc__, argv)
    command = "python -m experiments.compute_scaling" + "".join(f" {a}" for a in (argv if argv is not None
                                                                                    else sys.argv[1:]))
    if config.skip_measure:
        source = Path(config.measurements or Path(config.results_dir) / "compute_scaling.json")
        if not source.exists():
            fail(f"--skip-measure: no {source} (run without --skip-measure first)")
        measurements = json.loads(source.read_text())["measurements"]
        missing = [policy for policy in config.policies if policy not in measurements["policies"]]
        if missing:
            fail(f"--skip-measure: {source} has no measurements of {', '.join(missing)}")
        if config.retime_transports:
            Path(config.out).mkdir(parents=True, exist_ok=True)
            measurements = {**measurements, "transports": measure_transports(config, Path(config.out)),
                            "transports_machine": machine_facts(), "transports_command": command}
    else:
        measurements = measure(config, command)
    result = {"experiment": "compute_scaling", "command": command, "config": asdict(config),
              "measurements": measurements, **report(config, measurements)}
    path = write_results("compute_scaling", result, Path(config.results_dir))
    print(write("compute_scaling", result, config.docs))
    print(f"wrote {path}, {config.plot} and the scaling_compute section of {config.docs}")
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank-body"]:  # one rank of the transport sweep that measure_transports starts
        sweep_ranks(*json.loads(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
