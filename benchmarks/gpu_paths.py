"""Every GPU-only path of train/bc.py, a short run each on one GPU: does it work, and how fast.

CI has no GPU, so this is where these get exercised: the nccl backend, bf16 autocast and
fp16 with a GradScaler on CUDA, every comm hook on nccl (bf16's included, which needs a
CUDA build), SyncBatchNorm (ResNet-18's BatchNorm layers, converted under DDP), and
lerobot's ACT and diffusion policies on CUDA. DDP variants run under torchrun with one
rank per GPU: on a single GPU that is one rank (nccl refuses two ranks on one device),
which still builds the process group, the hooks and the SyncBatchNorm layers.

Each variant trains ``--steps`` steps; the table gives its samples/s and sync efficiency
over the log windows after the first, or the last line of its error. Every checkpoint is
then loaded on the CPU by evaluation's loader (``train.checkpoint.load_policy``), which is
what a GPU-trained policy meets on a CPU-only evaluation machine.

    python -m benchmarks.gpu_paths [--robots 20] [--episodes 10] [--steps 200] [--image-data STORE]
    python -m benchmarks.gpu_paths --variants mlp "mlp ddp comm hook none" act "act ddp" diffusion \
        "diffusion ddp" --rounds 3 --name gpu_ddp_cost     # DDP's fixed cost at one rank (~5 min)

``--image-data`` is a fleet store with a camera (the cnn variant's data); without it one is
collected with the ``front`` camera, which needs MuJoCo's EGL rendering on that machine.
``--variants`` runs some of them; ``--rounds`` runs them all once per round, back to back,
and keeps every round's samples/s beside the fastest round's figures (a launch-bound step
varies from run to run). ``--name`` names the results file and the table (default gpu_paths).
Each run's figures land in RESULTS/<name>.progress.json as it ends, so a job cut short by a
machine's time limit leaves what it measured, and the same command run again carries on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

import sim  # noqa: F401  (first: it selects headless rendering before mujoco loads)

import torch

from benchmarks.common import benchmark_parser, job_options, machine_facts, publish
from benchmarks.train_speed import measured_windows, start_training, window_figures
from collect import CollectConfig
from collect.engine import run_collection
from core.files import write_json_atomic
from train.checkpoint import load_policy
from train.comm.comm_hooks import COMM_HOOKS

# name: (data: "state" or "image", under torchrun, bc.py options)
VARIANTS = {
    "mlp": ("state", False, []),
    "mlp amp bf16": ("state", False, ["--amp", "bf16"]),
    "mlp amp fp16 (GradScaler)": ("state", False, ["--amp", "fp16"]),
    "mlp ema": ("state", False, ["--ema-decay", "0.999"]),
    # auto is none on a GPU; shm and ring are CPU-only
    **{f"mlp ddp comm hook {hook}": ("state", True, ["--comm-hook", hook])
       for hook in COMM_HOOKS if hook not in ("auto", "shm", "ring")},
    "cnn resnet18 ddp (SyncBatchNorm)": ("image", True, ["--policy", "cnn", "--vision-backbone", "resnet18",
                                                         "--batch-size", "64"]),
    **{f"{policy}{ddp}": ("state", bool(ddp), ["--policy", policy, "--lerobot-config", "small", "--batch-size", "64"])
       for policy in ("act", "diffusion") for ddp in ("", " ddp")},  # " ddp": one nccl rank, DDP's own cost
}


def run_variant(data: Path, out: Path, torchrun: bool, options: list[str], steps: int, log_interval: int) -> dict:
    """One bc.py run: its figures and whether its checkpoint loads on the CPU, or its error."""
    job = start_training(data, out, 1, 0, steps, log_interval, options, torchrun=torchrun)
    stderr = job.communicate()[1]
    if job.returncode != 0:
        lines = [line for line in stderr.splitlines() if line.strip()]
        return {"ok": False, "error": lines[-1] if lines else f"exit {job.returncode}"}
    figures = window_figures([measured_windows(out)])
    try:
        load_policy(out)
    except Exception as error:  # noqa: BLE001 (the table reports it)
        return {"ok": False, "error": f"the checkpoint does not load on the CPU: {error}"}
    config = json.loads((out / "config.json").read_text())
    return {"ok": True, **{key: round(value, 4) for key, value in figures.items()},
            "sync_batchnorm_layers": config["sync_batchnorm_layers"]}


def fastest_round(rounds: list[dict]) -> dict:
    """A variant's figures over its rounds: the fastest successful round's, with every round's samples/s
    (``round_samples_per_s``) when there were several; the first error if no round succeeded."""
    succeeded = [figures for figures in rounds if figures["ok"]]
    if not succeeded:
        return rounds[0]
    best = max(succeeded, key=lambda figures: figures["samples_per_s"])
    if len(rounds) == 1:
        return best
    return best | {"round_samples_per_s": [figures["samples_per_s"] if figures["ok"] else None for figures in rounds]}


def run_rounds(args: argparse.Namespace, run_one: Callable[[int, int, str], dict]) -> list[dict]:
    """``args.rounds`` rounds of every variant, back to back: ``rounds[r][name]`` is ``run_one(r, index, name)``.

    Each run's figures are kept in RESULTS/<name>.progress.json as soon as it ends. A rerun of the same job
    carries on after the last run kept (a different job starts afresh); the file goes once every round is done."""
    progress = args.results_dir / f"{args.name}.progress.json"
    job = json.loads(json.dumps(job_options(args), default=str))
    kept = json.loads(progress.read_text()) if progress.exists() else {}
    rounds = kept["rounds"] if kept.get("job") == job else []
    args.results_dir.mkdir(parents=True, exist_ok=True)
    for round_index in range(args.rounds):
        if round_index == len(rounds):
            rounds.append({})
        for index, name in enumerate(args.variants):
            if name in rounds[round_index]:
                print(f"round {round_index + 1}/{args.rounds}", name, "kept from an earlier run", flush=True)
                continue
            rounds[round_index][name] = run_one(round_index, index, name)
            print(f"round {round_index + 1}/{args.rounds}", name, rounds[round_index][name], flush=True)
            write_json_atomic(progress, {"job": job, "rounds": rounds})
    progress.unlink(missing_ok=True)
    return rounds


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--robots", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--steps", type=int, default=200, help="optimiser steps per variant")
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--image-data", type=Path, help="a fleet store with a camera, for the cnn variant")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), metavar="NAME",
                        help="the variants to run (names as in the table; default all)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each variant, back to back per round")
    parser.add_argument("--name", default="gpu_paths", help="name of the results file and the table")
    args = parser.parse_args(argv)
    unknown = [name for name in args.variants if name not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}; choose from: {', '.join(VARIANTS)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("gpu_paths: no CUDA device here (the CPU paths are covered by the tests)")

    work = Path(tempfile.mkdtemp(prefix="robofleet-gpu-paths-"))
    try:
        data = {"state": work / "fleet", "image": args.image_data or work / "fleet_images"}
        run_collection(CollectConfig(robots=args.robots, episodes=args.episodes, task=args.task,
                                     out=str(data["state"]), quiet=True))
        if args.image_data is None and any(VARIANTS[name][0] == "image" for name in args.variants):
            run_collection(CollectConfig(robots=4, episodes=4, task=args.task, cameras=("front",),
                                         out=str(data["image"]), quiet=True))

        def run_one(round_index: int, index: int, name: str) -> dict:
            kind, torchrun, options = VARIANTS[name]
            return run_variant(data[kind], work / f"run{round_index}_{index}", torchrun, options, args.steps,
                               args.log_interval)

        rounds = run_rounds(args, run_one)
    finally:
        shutil.rmtree(work)
    results = {name: fastest_round([r[name] for r in rounds]) for name in args.variants}

    machine = machine_facts()
    result = {"benchmark": "gpu_paths", "machine": machine,
              "job": job_options(args) | {"image_data": str(args.image_data) if args.image_data else None},
              "variants": {name: {"options": VARIANTS[name][2], "torchrun": VARIANTS[name][1], **figures}
                           for name, figures in results.items()}}
    header = ["date", "code", "device", "variant", "bc.py options", "samples/s", "sync eff", "SyncBatchNorm layers",
              "checkpoint loads on CPU"]
    rows = [[machine["date"], machine["code_version"], machine["device"], name,
             " ".join(VARIANTS[name][2]) or "defaults",
             round(r["samples_per_s"]) if r["ok"] else f"failed: {r['error'][:120]}",
             f"{r['sync_efficiency']:.2f}" if r["ok"] else "–", r.get("sync_batchnorm_layers", "–"),
             "yes" if r["ok"] else "–"] for name, r in results.items()]
    publish(args.name, result, header, rows, args)
    return result


if __name__ == "__main__":
    main()
