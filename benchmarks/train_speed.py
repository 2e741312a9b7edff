"""How fast train/bc.py trains, and how well it scales from 1 rank to 2.

``cpu_scaling`` trains the default config (mlp policy, 256x256, batch 512 per rank) on one
collected fleet (results: ``mlp_scaling``) and reads bc.py's own RUN/metrics.jsonl: samples/s over the training
steps and the sync efficiency (compute / (compute + exposed communication), see
docs/training.md), summed over the log windows after the first (start-up, warm caches).
On CPU (gloo) it runs four setups:

- ``1r1t``: 1 rank, 1 thread: one core's worth of training, the weak-scaling unit;
- ``1r2t``: 1 rank, 2 threads: what one process makes of both cores;
- ``2r1t``: 2 ranks under torchrun, 1 thread each, with the default comm hook (``auto``);
- ``2r1t_gloo``: the same with ``--comm-hook none``: torch's DDP with gloo's own all-reduce,
  the figure the default is held against;
- ``2p1t``: two independent 1-rank, 1-thread runs at once: what the machine itself gives
  two processes (shared caches, memory bandwidth, the VM), the limit for 2r1t.

Where this user may use the real-time scheduler (``chrt --fifo``: root or CAP_SYS_NICE),
1r1t, 2r1t and 2p1t run a second time under it in the same rounds (``*_fifo``): its
threads run the moment they are woken, so the two weak-scaling figures side by side say
how much of the gap is the operating system's scheduler rather than DDP or gloo.
``--no-realtime`` skips them.

    weak-scaling efficiency = samples/s of 2r1t / (2 x samples/s of 1r1t)     (goal >= 0.9)

and the same of 2r1t_gloo beside it.

``2r1t / 2p1t`` is what DDP keeps of the machine's own two-process throughput, and
``2r1t / 1r2t`` says whether two ranks use the two cores better than threads do.
Each round runs the setups back to back (the VM's speed drifts); ratios are medians of
within-round ratios, rates the best round. Options after ``--`` go to every bc.py run,
which is how bucket size, accumulation and threads are tuned:

    python -m benchmarks.train_speed [--robots 20] [--episodes 10] [--steps 300] [--rounds 3] [--no-realtime]
                                     [-- --grad-accum 2]

``--case image`` measures the visuomotor path instead: the cnn on ``proprio+cameras``
(front and wrist cameras at 96 px, uint8 through the loader, shifted and converted on
the training device), batch 32 per rank, on a camera fleet collected for it. Its goals:
weak scaling >= 0.9, as for the mlp, and data wait under 10% of a 2-rank step
(``data_wait_share``). Beside 1r1t and 1r2t it runs ``bare_1r1t`` and ``bare_1r2t``: bc.py's policy,
data and optimiser in a loop with nothing else (benchmarks/bare_loop.py); goal: bc.py / bare >= 0.9
(``bc_vs_bare_*``). It writes train_speed_image.json and its own table. ``--case act`` runs ACT on
the same cameras (batch 8, 40 steps) on 1r1t and 1r2t, each beside the bare loop.

How near each case runs to the machine's limit (benchmarks/flops.py): FLOPs per sample of one
step (``flops_per_sample``), each round's fp32 and bf16 matmul peaks on 1 and 2 threads
(``peaks``), and per setup ``utilisation``: GFLOP/s and MFU against the peak of the dtype it
trained in (bf16 where the run resolved ``--amp`` to it, else fp32) on the threads it used,
ranks x threads x runs up to the cores: 2r1t and 2p1t are held against the 2-thread peak.

``--case threads`` measures runs that share the host with no ``--threads`` (bc.py's own
share of the cores, train/threads.py): ``2p_auto``, two 1-rank runs at once, whose slower
one is held against ``1r1t`` alone, and ``2a_auto``, two torchrun agents of one rank each
on loopback (``--nnodes=2``) against ``2r_auto``, one ``--standalone`` run of 2 ranks. Goals:
each >= 0.8. It writes train_speed_threads.json and its own table.

Where CUDA is available (never in CI) ``gpu_scaling`` measures the same on nccl: 1 GPU,
and 2 GPUs when there are two. Other training measurements (our ACT against
``lerobot-train``: benchmarks/act_vs_lerobot.py) join ``main`` as further sections.
Writes benchmarks/results/train_speed.json (train_speed_gpu.json with ``--no-cpu``) and a
row per device in benchmarks/README.md. ``--no-cpu`` skips the gloo setups, for a GPU machine.
With ``--data`` (a store of yours) it prints the rows, and only ``--out`` writes (the JSON).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import sim  # noqa: F401  (first: it selects headless rendering before mujoco loads)

import torch

from benchmarks.bare_loop import policy_flops
from benchmarks.common import (TORCHRUN_ENV, agent_command, benchmark_parser, job_options, machine_facts,
                               publish, python_command, realtime_permitted)
from benchmarks.flops import cpu_features, machine_peaks, utilisation
from benchmarks.train_tables import LIMIT_HEADER, bare_table, limit_cells, threads_table
from collect import CollectConfig
from collect.engine import run_collection
from train.monitor import read_records

REPO = Path(__file__).resolve().parent.parent
# name: (ranks per run, threads per rank (0: no --threads, bc.py's own share), runs at once, under the real-time
# scheduler, one torchrun agent per rank (as on that many machines) instead of one --standalone torchrun)
CPU_SETUPS = {"1r1t": (1, 1, 1, False, False), "1r2t": (1, 2, 1, False, False), "2r1t": (2, 1, 1, False, False),
              "2r1t_gloo": (2, 1, 1, False, False), "2p1t": (1, 1, 2, False, False)}
# bc.py options a setup adds after everyone's (so they win): 2r1t_gloo is torch's DDP with no comm hook
SETUP_OPTIONS = {"2r1t_gloo": ["--comm-hook", "none"]}
# --case image and act: bc.py's policy, data and optimiser in a bare loop (benchmarks/bare_loop.py), beside 1r1t
# and 1r2t in every round
BARE_SETUPS = {"bare_1r1t": CPU_SETUPS["1r1t"], "bare_1r2t": CPU_SETUPS["1r2t"]}
REALTIME_SETUPS = {f"{name}_fifo": (*CPU_SETUPS[name][:3], True, False) for name in ("1r1t", "2r1t", "2p1t")}
# --case threads: runs that share the host with no --threads, against one run alone
THREAD_SETUPS = {"1r1t": CPU_SETUPS["1r1t"], "2p_auto": (1, 0, 2, False, False), "2r_auto": (2, 0, 1, False, False),
                 "2a_auto": (2, 0, 1, False, True)}
# case: (bc.py options, collect options, robots, episodes, steps, log interval), the defaults of each case
CAMERAS = {"cameras": ("front", "wrist"), "image_size": 96}
CASES = {
    "mlp": ([], {}, 20, 10, 300, 50),
    "image": (["--policy", "cnn", "--inputs", "proprio+cameras", "--batch-size", "32"], CAMERAS, 6, 5, 100, 20),
    "act": (["--policy", "act", "--inputs", "proprio+cameras", "--batch-size", "8"], CAMERAS, 6, 5, 40, 10),
    "threads": ([], {}, 20, 10, 300, 50),
}


def start_training(data: Path, out: Path, ranks: int, threads: int, steps: int, log_interval: int,
                   options: list[str], torchrun: bool = False, realtime: bool = False,
                   launcher: list[str] | None = None) -> subprocess.Popen:
    """bc.py in the background, under torchrun when ``ranks > 1`` or ``torchrun`` (DDP with one rank), and
    under the real-time scheduler when ``realtime``; or after ``launcher`` (a torchrun agent's command).
    ``threads`` 0 gives no --threads (bc.py's own share of the cores)."""
    command = [*(launcher or python_command(ranks, torchrun, realtime)), str(REPO / "train" / "bc.py"),
               "--data", str(data), "--out", str(out), "--max-steps", str(steps), "--log-interval", str(log_interval),
               "--checkpoint-interval", str(steps), *(["--threads", str(threads)] if threads else []), "--no-resume",
               *options]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **TORCHRUN_ENV}, cwd=REPO)


def train_figures(data: Path, work: Path, ranks: int, threads: int, runs: int, realtime: bool, agents: bool,
                  steps: int, log_interval: int, options: list[str]) -> dict:
    """``runs`` bc.py runs at once (each of ``ranks`` torchrun agents when ``agents``): samples/s (summed, and
    the slowest run's) and sync efficiency over the log windows after the first."""
    outs = [work / f"run{index}" for index in range(runs)]
    launchers = [[agent_command(ranks, "train-speed")] * ranks if agents else [None] for _ in outs]
    jobs = [start_training(data, out, ranks, threads, steps, log_interval, options, realtime=realtime,
                           launcher=launcher)
            for out, agents_of_run in zip(outs, launchers) for launcher in agents_of_run]
    try:
        for job in jobs:
            stderr = job.communicate()[1]
            if job.returncode != 0:
                raise RuntimeError(f"bc.py failed ({' '.join(job.args)}):\n{stderr[-3000:]}")
    finally:  # one run failing ends the others
        for job in jobs:
            if job.poll() is None:
                job.kill()
                job.wait()
    windows = [measured_windows(out) for out in outs]
    amp = json.loads((outs[0] / "config.json").read_text())["config"]["optim"]["amp"]  # as the run resolved it
    shutil.rmtree(work)
    if not all(windows):
        raise ValueError(f"--steps {steps} leaves no log window after the first (log interval {log_interval})")
    slowest = min(window_figures([run])["samples_per_s"] for run in windows)
    return window_figures(windows) | {"slowest_run_samples_per_s": slowest, "amp": amp}


def bare_figures(data: Path, work: Path, ranks: int, threads: int, runs: int, realtime: bool, agents: bool,
                 steps: int, log_interval: int, options: list[str]) -> dict:
    """benchmarks/bare_loop.py on bc.py's ``options`` (1 rank, ``threads``), figures as ``train_figures``'."""
    command = [sys.executable, "-m", "benchmarks.bare_loop", "--threads", str(threads), "--steps", str(steps),
               "--log-interval", str(log_interval), "--", "--data", str(data), "--out", str(work), *options]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if completed.returncode != 0:
        raise RuntimeError(f"the bare loop failed ({' '.join(command)}):\n{completed.stderr[-3000:]}")
    bare = json.loads(completed.stdout.splitlines()[-1])
    return {"samples_per_s": bare["samples_per_s"], "sync_efficiency": 1.0, "data_wait_s": bare["data_wait_s"],
            "compute_s": bare["seconds"] - bare["data_wait_s"], "communication_s": 0.0,
            "slowest_run_samples_per_s": bare["samples_per_s"], "amp": bare["amp"]}


def measured_windows(run: Path) -> list[dict]:
    """The log windows of RUN/metrics.jsonl after the first (start-up, cold caches)."""
    return [record for record in read_records(run / "metrics.jsonl") if "samples_per_s" in record][1:]


def window_figures(windows: list[list[dict]]) -> dict:
    """Samples/s (summed over the runs) and sync efficiency of each run's measured windows."""
    rate = 0.0
    for run in windows:
        busy = [w["data_wait_s"] + w["compute_s"] + w["communication_s"] for w in run]
        rate += sum(w["samples_per_s"] * b for w, b in zip(run, busy)) / sum(busy)
    compute, communication, data_wait = (sum(w[key] for run in windows for w in run)
                                         for key in ("compute_s", "communication_s", "data_wait_s"))
    return {"samples_per_s": rate, "sync_efficiency": compute / (compute + communication),
            "data_wait_s": data_wait, "compute_s": compute, "communication_s": communication}


def peak_threads(setup: tuple) -> int:
    """The threads whose matmul peak a setup's MFU is held against: all it runs (ranks x threads x runs, 0
    threads being bc.py's share of the cores), at most the cores: 2r1t and 2p1t use both cores as 1r2t does."""
    cores = os.cpu_count() or 1
    ranks, threads, runs = setup[:3]
    return min(cores, ranks * (threads or cores) * runs)


def scaling(setups: dict[str, tuple[int, int, int, bool]], data: Path, work: Path, args, ratios: dict,
            flops: dict | None = None) -> dict:
    """Every setup once per round, back to back; the best rates and the median within-round ratios. With
    ``flops`` (``policy_flops``) each round first measures the matmul peaks, and the result has each setup's
    ``utilisation`` against them."""
    rounds, peaks, threads = [], [], {name: peak_threads(setup) for name, setup in setups.items()}
    for _ in range(args.rounds):
        if flops:
            peaks.append(machine_peaks(tuple(sorted(set(threads.values())))))
        rounds.append({name: (bare_figures if name in BARE_SETUPS else train_figures)(
            data, work / name, *setup, args.steps, args.log_interval,
            [*args.bc_options, *SETUP_OPTIONS.get(name, [])]) for name, setup in setups.items()})
    best = {name: max(rounds, key=lambda r: r[name]["samples_per_s"])[name] for name in setups}
    return {
        "setups": {name: dict(zip(("ranks", "threads", "runs", "realtime", "agents"), setup))
                   for name, setup in setups.items()},
        "best": {name: {key: round(value, 4) if isinstance(value, float) else value for key, value in figures.items()}
                 for name, figures in best.items()},
        "rounds": rounds,
        "ratios": {name: round(statistics.median(ratio(r) for r in rounds), 3) for name, ratio in ratios.items()},
        "data_wait_share": round(statistics.median(  # of a 2-rank step, as the ranks see it
            r["2r1t"]["data_wait_s"] / sum(r["2r1t"][k] for k in ("data_wait_s", "compute_s", "communication_s"))
            for r in rounds), 4) if "2r1t" in setups else None,
        **({"flops_per_sample": flops, "cpu_features": cpu_features(), "peaks": peaks,
            "utilisation": utilisation(rounds, peaks, flops["total"], threads)} if flops else {}),
    }


def rate(r: dict, name: str) -> float:
    """A round's samples/s of setup ``name``."""
    return r[name]["samples_per_s"]


BARE_RATIOS = {"bc_vs_bare_1r1t": lambda r: rate(r, "1r1t") / rate(r, "bare_1r1t"),
               "bc_vs_bare_1r2t": lambda r: rate(r, "1r2t") / rate(r, "bare_1r2t")}


def cpu_scaling(data: Path, work: Path, args, realtime: bool, flops: dict | None = None, bare: bool = False) -> dict:
    """1r1t, 1r2t, 2r1t, 2r1t_gloo and 2p1t on CPU (gloo); with ``realtime`` also 1r1t, 2r1t and 2p1t under
    ``chrt --fifo``; with ``bare`` the bare loop beside 1r1t and 1r2t; with ``flops`` their utilisation."""

    ratios = {
        "weak_scaling_efficiency": lambda r: rate(r, "2r1t") / (2 * rate(r, "1r1t")),
        "weak_scaling_efficiency_gloo": lambda r: rate(r, "2r1t_gloo") / (2 * rate(r, "1r1t")),
        "two_ranks_vs_two_processes": lambda r: rate(r, "2r1t") / rate(r, "2p1t"),
        "machine_two_processes": lambda r: rate(r, "2p1t") / (2 * rate(r, "1r1t")),
        "two_ranks_vs_two_threads": lambda r: rate(r, "2r1t") / rate(r, "1r2t"),
        "two_threads_vs_one": lambda r: rate(r, "1r2t") / rate(r, "1r1t"),
    }
    if realtime:
        ratios |= {"weak_scaling_efficiency_fifo": lambda r: rate(r, "2r1t_fifo") / (2 * rate(r, "1r1t_fifo")),
                   "two_ranks_vs_two_processes_fifo": lambda r: rate(r, "2r1t_fifo") / rate(r, "2p1t_fifo")}
    setups = CPU_SETUPS | (REALTIME_SETUPS if realtime else {})
    if bare:  # each beside the setup it is held against
        setups = {name: (setups | BARE_SETUPS)[name] for name in ("1r1t", "bare_1r1t", "1r2t", "bare_1r2t")} | setups
        ratios |= BARE_RATIOS
    return scaling(setups, data, work, args, ratios, flops)


def bare_scaling(data: Path, work: Path, args, flops: dict) -> dict:
    """--case act: one rank on 1 and 2 threads, each beside the bare loop, and their utilisation."""
    setups = {"1r1t": CPU_SETUPS["1r1t"], "bare_1r1t": BARE_SETUPS["bare_1r1t"], "1r2t": CPU_SETUPS["1r2t"],
              "bare_1r2t": BARE_SETUPS["bare_1r2t"]}
    return scaling(setups, data, work, args, BARE_RATIOS, flops)


def threads_scaling(data: Path, work: Path, args) -> dict:
    """Runs sharing the host with no --threads: two 1-rank runs at once against one alone at 1 thread, and
    two torchrun agents of one rank each against one --standalone run of 2 ranks. Goals: each >= 0.8."""
    ratios = {
        "each_of_two_runs_vs_one_alone":
            lambda r: r["2p_auto"]["slowest_run_samples_per_s"] / r["1r1t"]["samples_per_s"],
        "two_agents_vs_standalone": lambda r: r["2a_auto"]["samples_per_s"] / r["2r_auto"]["samples_per_s"],
    }
    return scaling(THREAD_SETUPS, data, work, args, ratios)


def gpu_scaling(data: Path, work: Path, args) -> dict | None:
    """1 GPU, and 2 GPUs (nccl) when there are two; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    threads = max(1, (os.cpu_count() or 2) // 2)
    setups = {"1gpu": (1, threads, 1, False, False)}
    ratios = {}
    if torch.cuda.device_count() >= 2:
        setups["2gpu"] = (2, threads, 1, False, False)
        ratios["weak_scaling_efficiency"] = lambda r: r["2gpu"]["samples_per_s"] / (2 * r["1gpu"]["samples_per_s"])
    return scaling(setups, data, work, args, ratios) | {"gpus": torch.cuda.device_count(),
                                                        "gpu": torch.cuda.get_device_name(0)}


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--data", type=Path, help="train on this fleet store instead of collecting one")
    parser.add_argument("--case", choices=CASES, default="mlp",
                        help="the default mlp, the cnn on cameras, or the mlp's runs sharing the host (threads)")
    parser.add_argument("--robots", type=int, help="robots collected (mlp 20, image 6)")
    parser.add_argument("--episodes", type=int, help="episodes per robot (mlp 10, image 5)")
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--steps", type=int, help="optimiser steps per run (mlp 300, image 100)")
    parser.add_argument("--log-interval", type=int, help="steps per measured window (mlp 50, image 20)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-cpu", action="store_true", help="skip the gloo setups (on a GPU machine: nccl only)")
    parser.add_argument("--no-realtime", action="store_true", help="skip the setups under the real-time scheduler")
    parser.add_argument("bc_options", nargs="*", help="after --: options for every bc.py run")
    args = parser.parse_args(argv)
    case_options, collect_options, *defaults = CASES[args.case]
    for name, default in zip(("robots", "episodes", "steps", "log_interval"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, default)
    args.bc_options = [*case_options, *args.bc_options]
    if args.no_cpu and not torch.cuda.is_available():
        parser.error("--no-cpu leaves nothing to measure on a machine without CUDA")

    work = Path(tempfile.mkdtemp(prefix="robofleet-train-bench-"))
    try:
        data = args.data
        if data is None:
            data = work / "fleet"
            run_collection(CollectConfig(robots=args.robots, episodes=args.episodes, task=args.task, out=str(data),
                                         quiet=True, **collect_options))
        realtime = not args.no_realtime and realtime_permitted()
        flops = None if args.case == "threads" or args.no_cpu else policy_flops(
            ["--data", str(data), "--out", str(work / "flops"), *args.bc_options])
        if args.case == "threads":
            cpu, gpu = threads_scaling(data, work, args), None
        elif args.case == "act":
            cpu, gpu = bare_scaling(data, work, args, flops), None
        else:
            cpu = None if args.no_cpu else cpu_scaling(data, work, args, realtime, flops, bare=args.case == "image")
            gpu = gpu_scaling(data, work, args)
    finally:
        shutil.rmtree(work)

    machine = machine_facts()
    job = f"{args.task} {args.robots}x{args.episodes}" if args.data is None else Path(args.data).name
    options = " ".join(args.bc_options) or "defaults"
    name = "train_speed" if args.case == "mlp" else f"train_speed_{args.case}"
    result = {"benchmark": name, "machine": machine,
              "job": job_options(args) | {"data": str(args.data) if args.data else None},
              f"{args.case}_scaling": cpu, "gpu_scaling": gpu}
    if args.case in ("threads", "act"):
        table = threads_table if args.case == "threads" else bare_table
        publish(name, result, *table(machine, job, options, args.steps, cpu), args, recorded=args.data is None)
        return result
    header = ["date", "code", "device", "job", "bc.py options", "steps", "1 rank x1 samples/s", "1 rank x2 samples/s",
              "2 ranks samples/s", "2 procs samples/s", "sync eff 2 ranks", "weak scaling",
              "2 ranks gloo samples/s", "sync eff 2 ranks gloo", "weak scaling gloo", "machine 2 procs",
              "2 ranks / 2 procs", "2 ranks / 1 rank x2", "sync eff 2 ranks (fifo)", "weak scaling (fifo)",
              "2 ranks / 2 procs (fifo)", "data wait 2 ranks", *LIMIT_HEADER]
    rows = []
    if cpu is not None:
        best, ratios = cpu["best"], cpu["ratios"]
        rows.append([machine["date"], machine["code_version"], "cpu (gloo)", job, options, args.steps,
                     round(best["1r1t"]["samples_per_s"]), round(best["1r2t"]["samples_per_s"]),
                     round(best["2r1t"]["samples_per_s"]), round(best["2p1t"]["samples_per_s"]),
                     f"{best['2r1t']['sync_efficiency']:.2f}", f"{ratios['weak_scaling_efficiency']:.2f}",
                     round(best["2r1t_gloo"]["samples_per_s"]), f"{best['2r1t_gloo']['sync_efficiency']:.2f}",
                     f"{ratios['weak_scaling_efficiency_gloo']:.2f}", f"{ratios['machine_two_processes']:.2f}",
                     f"{ratios['two_ranks_vs_two_processes']:.2f}",
                     f"{ratios['two_ranks_vs_two_threads']:.2f}",
                     *((f"{best['2r1t_fifo']['sync_efficiency']:.2f}", f"{ratios['weak_scaling_efficiency_fifo']:.2f}",
                        f"{ratios['two_ranks_vs_two_processes_fifo']:.2f}") if "2r1t_fifo" in best else ["–"] * 3),
                     f"{cpu['data_wait_share']:.1%}", *limit_cells(cpu)])
    if gpu is not None:
        two = gpu["best"].get("2gpu")
        two_gpus = ([round(two["samples_per_s"]), "–", f"{two['sync_efficiency']:.2f}",
                     f"{gpu['ratios']['weak_scaling_efficiency']:.2f}"] if two else ["–"] * 4)
        backend = "nccl" if two else "1 process"  # one GPU: no DDP, so no nccl either
        rows.append([machine["date"], machine["code_version"], f"{gpu['gpus']}x {gpu['gpu']} ({backend})", job, options,
                     args.steps, round(gpu["best"]["1gpu"]["samples_per_s"]), "–", *two_gpus, *["–"] * 17])
    # A GPU-only run keeps its own JSON (the CPU figures stay in train_speed.json); the table is shared.
    publish(name if cpu is not None else f"{name}_gpu", result, header, rows, args, table=name,
            recorded=args.data is None)
    return result


if __name__ == "__main__":
    main()
