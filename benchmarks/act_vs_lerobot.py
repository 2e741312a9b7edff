"""Training steps per second of LeRobot's ACT: our train/bc.py against ``lerobot-train``.

Both train the same ``ACTPolicy`` (lerobot's class, the ``small`` sizes of
train/policies/lerobot_policies.py, chunk 16, 8 action steps, VAE on) on the same
data with the same batch size, one process each, on the machine's device (CUDA where
there is one, else the CPU):

- ``ours``: ``python train/bc.py --policy act`` on the fleet store (in-memory windows);
- ``lerobot``: ``lerobot-train --policy.type=act`` on the store exported with
  ``dataset export-lerobot``, offline (``--dataset.root``, no hub, no wandb, no
  pretrained weights, ``--policy.device`` the same as ours), with ``--lerobot-workers``
  DataLoader workers.

The learning-rate settings are each trainer's own (ours: AdamW with warmup and cosine;
lerobot's ACT preset: AdamW at 1e-5); they do not change what a step costs. The AdamW
implementations differ: ours is torch's fused kernel (``train.schedule.adamw``, from
code acbcdca on), lerobot's preset torch's default (a loop over the tensors on CPU).

A step's time is what each trainer reports for its own loop: ours from
``samples_per_s`` in RUN/metrics.jsonl (the whole loop: data wait, forward, backward,
optimiser, logging), lerobot's as ``data_s + updt_s`` from its log lines. The first
log window (warm-up) is dropped. Start-up is not counted. The machine is shared, so
each round runs both back to back and the table shows the median ratio.

    python -m benchmarks.act_vs_lerobot [--robots 6] [--episodes 5] [--steps 60] [--rounds 3]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import sim  # noqa: F401  (first: it selects headless rendering before mujoco loads)

import torch

from benchmarks.common import benchmark_parser, job_options, machine_facts, publish
from collect import CollectConfig
from collect.engine import run_collection
from dataset import FleetStore
from dataset.lerobot_io import export_lerobot
from train.policies.lerobot_policies import SMALL

REPO = Path(__file__).resolve().parent.parent
HORIZON, N_ACTION_STEPS = 16, 8
LOG_INTERVAL = 10


def run_checked(command: list[str], **options) -> subprocess.CompletedProcess:
    completed = subprocess.run(command, capture_output=True, text=True, **options)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{completed.stderr[-3000:]}")
    return completed


def ours_command(store: Path, out: Path, steps: int, batch_size: int, *options: str) -> list[str]:
    """``train/bc.py --policy act`` at the benchmark's sizes, in one process."""
    return [sys.executable, str(REPO / "train" / "bc.py"), "--data", str(store), "--out", str(out),
            "--policy", "act", "--lerobot-config", "small", "--horizon", str(HORIZON),
            "--n-action-steps", str(N_ACTION_STEPS), "--batch-size", str(batch_size), "--max-steps", str(steps),
            "--log-interval", str(LOG_INTERVAL), "--val-fraction", "0", *options]


LEROBOT_TRAIN = [sys.executable, "-m", "lerobot.scripts.lerobot_train"]  # lerobot-train, from this interpreter


def lerobot_command(root: Path, out: Path, steps: int, batch_size: int, workers: int, *options: str) -> list[str]:
    """``lerobot-train --policy.type=act`` on the export at ``root``, at the same sizes, chunk and device as ours."""
    sizes = [f"--policy.{name}={value}" for name, value in SMALL["act"].items()]
    device = "cuda" if torch.cuda.is_available() else "cpu"  # what bc.py picks
    return [*LEROBOT_TRAIN,
            "--dataset.repo_id=robofleet/bench", f"--dataset.root={root}", "--policy.type=act",
            "--policy.push_to_hub=false", f"--policy.device={device}",
            "--policy.pretrained_backbone_weights=null", *sizes, f"--policy.chunk_size={HORIZON}",
            f"--policy.n_action_steps={N_ACTION_STEPS}", f"--batch_size={batch_size}", f"--steps={steps}",
            f"--log_freq={LOG_INTERVAL}", f"--num_workers={workers}", "--eval_freq=0", "--wandb.enable=false",
            f"--output_dir={out}", *options]


def lerobot_shell(command: list[str]) -> str:
    """``command`` (a ``lerobot_command``) as a user types it: ``lerobot-train ...``, offline."""
    if command[:len(LEROBOT_TRAIN)] != LEROBOT_TRAIN:
        raise ValueError(f"not a lerobot-train command: {' '.join(command[:3])}")
    return "HF_HUB_OFFLINE=1 " + " ".join(["lerobot-train", *command[len(LEROBOT_TRAIN):]])


def lerobot_env(work: Path) -> dict:
    """lerobot-train's environment: offline (no hub, no wandb), its cache under ``work``."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
            "HF_LEROBOT_HOME": str(work / "hf_lerobot")}


def ours_steps_per_s(store: Path, out: Path, steps: int, batch_size: int) -> float:
    """Steps per second of ``train/bc.py --policy act`` (after its first log window)."""
    run_checked(ours_command(store, out, steps, batch_size, "--checkpoint-interval", str(steps), "--no-resume"),
                cwd=REPO)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    seconds_per_step = [batch_size / r["samples_per_s"] for r in records if "samples_per_s" in r][1:]
    return 1 / statistics.mean(seconds_per_step)


def lerobot_steps_per_s(root: Path, out: Path, steps: int, batch_size: int, workers: int) -> float:
    """Steps per second of ``lerobot-train --policy.type=act`` (after its first log window)."""
    completed = run_checked(lerobot_command(root, out, steps, batch_size, workers, "--save_checkpoint=false"),
                            env=lerobot_env(out.parent), cwd=out.parent)
    windows = re.findall(r"updt_s:([\d.]+) data_s:([\d.]+)", completed.stdout + completed.stderr)
    seconds_per_step = [float(update) + float(data) for update, data in windows][1:]
    return 1 / statistics.mean(seconds_per_step)


def act_vs_lerobot(store: Path, work: Path, steps: int = 60, batch_size: int = 64, lerobot_workers: int = 2,
                   rounds: int = 3) -> dict:
    """Steps per second of both trainers on ``store`` (exported under ``work``), ``rounds`` times each."""
    if steps < 2 * LOG_INTERVAL:
        raise ValueError(f"steps must be at least {2 * LOG_INTERVAL} (the first log window is warm-up)")
    root = export_lerobot(FleetStore.open(store), work / "lerobot", progress=False)
    measured = []
    for index in range(rounds):
        ours = ours_steps_per_s(store, work / f"ours_{index}", steps, batch_size)
        lerobot = lerobot_steps_per_s(root, work / f"lerobot_{index}", steps, batch_size, lerobot_workers)
        measured.append({"ours": ours, "lerobot": lerobot, "ratio": ours / lerobot})
    return {
        "steps_per_s_best": {name: round(max(r[name] for r in measured), 2) for name in ("ours", "lerobot")},
        "rounds": [{name: round(value, 3) for name, value in r.items()} for r in measured],
        "ours_vs_lerobot": round(statistics.median(r["ratio"] for r in measured), 3),
        "act_config": {**SMALL["act"], "chunk_size": HORIZON, "n_action_steps": N_ACTION_STEPS},
        "batch_size": batch_size, "steps": steps, "lerobot_workers": lerobot_workers,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--robots", type=int, default=6)
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--steps", type=int, default=60, help="training steps per run")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lerobot-workers", type=int, default=2, help="lerobot-train --num_workers")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="robofleet-act-bench-"))
    try:
        run_collection(CollectConfig(robots=args.robots, episodes=args.episodes, task=args.task,
                                     out=str(work / "fleet"), quiet=True))
        frames = FleetStore.open(work / "fleet").num_frames
        figures = act_vs_lerobot(work / "fleet", work, args.steps, args.batch_size, args.lerobot_workers, args.rounds)
    finally:
        shutil.rmtree(work)
    machine = machine_facts()
    result = {"benchmark": "act_vs_lerobot", "machine": machine,
              "job": job_options(args) | {"frames": frames}, **figures}
    header = ["date", "code", "data", "batch", "ours steps/s", "lerobot-train steps/s", "ours/lerobot"]
    gpu = machine["device"] != "cpu"
    data = f"{args.task} {args.robots}x{args.episodes} ({frames} frames" + (f", on {machine['device']})" if gpu else ")")
    row = [machine["date"], machine["code_version"], data, args.batch_size, figures["steps_per_s_best"]["ours"],
           figures["steps_per_s_best"]["lerobot"], f"{figures['ours_vs_lerobot']:.2f}"]
    # GPU figures keep their own JSON (the CPU ones stay in act_vs_lerobot.json); the table is shared.
    publish("act_vs_lerobot" + ("_gpu" if gpu else ""), result, header, [row], args, table="act_vs_lerobot")
    return result


if __name__ == "__main__":
    main()
