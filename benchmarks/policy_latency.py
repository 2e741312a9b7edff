"""What a robot pays to run each policy: per-step latency, parameter count and checkpoint bytes.

Every case is one policy in eval mode at batch 1, timed on 1 CPU thread
(``torch.set_num_threads(1)``) and, when a GPU is present, on CUDA too (every call
synchronised). Its spec's ``n_action_steps`` is forced to 1, so every call runs the model:

- ``select_action``: ``Policy.select_action`` on one numpy observation dict, as evaluation
  calls it: the per-step inference cost (observation history, tensors, the model, the queue).
- ``bare``: ``predict_chunk`` on observation windows already on the device as tensors: the
  model alone, the limit. ``select/bare`` is the wrapper's overhead.
- ``lerobot`` (act and diffusion): the peer a LeRobot user would pick on the same weights:
  the policy exported by ``train.export`` and run by ``eval.lerobot_policy.LeRobotAgent``
  (``from_pretrained``, LeRobot's pre- and postprocessors around its own ``select_action``,
  its ``n_action_steps`` 1 as well). ``lerobot/select`` > 1: ours is faster.

Each setup is called ``--warmup`` times (at most a tenth of the repetitions), then each
repetition times every setup once, back to back (a shared VM's speed drifts), the first in
turn (none always runs after another model evicted its weights from the caches):
``--repetitions`` of them (``--diffusion-repetitions`` for diffusion, whose every call runs
its whole denoising loop) give the median and p99 in ms (of fewer than 100 calls, p99 is
close to their maximum).

Parameters: ``sum(p.numel())`` over the policy's parameters (normalisation buffers excluded).
Checkpoint bytes: a checkpoint's weights and their description (``model.safetensors`` and
``checkpoint.json``), all a robot needs to run it.

By default every size of every kind (``CASES``) is built from a ``PolicyOptions`` on the
pick_place task's features (mlp: ``state`` inputs; the others: ``proprio+cameras``, front
and wrist at ``--image-size``) with synthetic statistics: nothing is collected, nothing
downloads (backbones are never pretrained). ``--checkpoint`` measures trained runs or
checkpoint files instead (beside the cases of ``--kinds``, if given); their rows also give
the size on disk of the whole checkpoint file. The cases alone write
benchmarks/results/policy_latency.json and rows in benchmarks/README.md; with ``--checkpoint`` the
table is printed, and only ``--out`` writes (the JSON).

    python -m benchmarks.policy_latency [--kinds mlp cnn act diffusion] [--repetitions 300]
    python -m benchmarks.policy_latency --checkpoint runs/teacher runs/student --out runs/distill/latency.json
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import sim  # noqa: F401  (first: it selects headless rendering before mujoco loads)

import numpy as np
import torch

from benchmarks import synthetic
from benchmarks.common import benchmark_parser, machine_facts, publish
from core.errors import fail
from eval.lerobot_policy import LeRobotAgent
from train.checkpoint import DESCRIPTION, WEIGHTS, Checkpoint, load_policy, open_checkpoint
from train.policies.options import CNNOptions, LeRobotOptions, PolicyOptions
from train.export import EXPORTABLE, export_lerobot_policy

TASK, CAMERAS = "pick_place", ("front", "wrist")
KINDS = ("mlp", "cnn", "act", "diffusion")
CASES = {  # name -> the PolicyOptions fields that make it
    "mlp 64x64": {"policy": "mlp", "hidden": (64, 64)},
    "mlp 256x256": {"policy": "mlp"},
    "mlp 1024x1024x1024": {"policy": "mlp", "hidden": (1024, 1024, 1024)},
    "cnn small": {"policy": "cnn"},
    "cnn resnet18": {"policy": "cnn", "cnn": CNNOptions(vision_backbone="resnet18")},
    "act small": {"policy": "act"},
    "act default": {"policy": "act", "lerobot": LeRobotOptions(lerobot_config="default")},
    "diffusion small": {"policy": "diffusion"},
    "diffusion default": {"policy": "diffusion", "lerobot": LeRobotOptions(lerobot_config="default")},
}


def task_features(image_size: int) -> dict[str, dict]:
    """The pick_place task's features with the front and wrist cameras (the env is only probed)."""
    return synthetic.task_features(TASK, CAMERAS, image_size)


def synthetic_checkpoint(case: str, features: dict[str, dict]) -> Checkpoint:
    """The checkpoint of case ``case`` of ``CASES``, freshly initialised."""
    fields = CASES[case]
    config = PolicyOptions(**fields, inputs="state" if fields["policy"] == "mlp" else "proprio+cameras")
    return synthetic.synthetic_checkpoint(config, features, TASK)


def trained_checkpoint(path: Path) -> tuple[Checkpoint, int]:
    """A run's newest intact checkpoint (or the checkpoint ``path``), without its resume state, and the
    size of all its files (its resume state included)."""
    try:
        checkpoint = open_checkpoint(path)
    except ValueError as error:
        fail(f"--checkpoint {path}: {error}")
    return checkpoint, sum(file.stat().st_size for file in checkpoint.path.iterdir())


def checkpoint_bytes(directory: Path) -> int:
    """The bytes of a checkpoint's weights and description (what evaluation reads)."""
    return sum((directory / name).stat().st_size for name in (WEIGHTS, DESCRIPTION))


def checkpoints(paths: list[Path], cases: list[str], image_size: int):
    """(case, evaluation content, file size or None) of each checkpoint, then of each of ``cases``, one at a time."""
    for path in paths:
        yield str(path), *trained_checkpoint(path)
    features = task_features(image_size) if cases else {}
    for case in cases:
        yield case, synthetic_checkpoint(case, features), None


def observation_of(policy, features: dict[str, dict]) -> dict[str, np.ndarray]:
    """One random env observation of the policy's inputs (images uint8 H x W x C)."""
    rng = np.random.default_rng(0)
    return {name: rng.integers(0, 256, features[name]["shape"], np.uint8) if features[name]["dtype"] == "image"
            else rng.standard_normal(features[name]["shape"]).astype(np.float32) for name in policy.spec.features}


def time_calls(setups: dict, repetitions: int, warmup: int, device: str) -> dict[str, list[float]]:
    """Milliseconds per call of each setup: ``warmup`` calls each, then ``repetitions`` rounds of one call each,
    each round starting with the next setup."""
    synchronise = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {name: [] for name in setups}
    names = list(setups)
    with torch.no_grad():
        for call in setups.values():
            for _ in range(warmup):
                call()
        synchronise()
        for repetition in range(repetitions):
            for name in names[repetition % len(names):] + names[: repetition % len(names)]:
                start = time.perf_counter()
                setups[name]()
                synchronise()
                times[name].append(1000 * (time.perf_counter() - start))
    return times


def measure(case: str, path: Path, file_bytes: int | None, repetitions: int, warmup: int,
            devices: list[str]) -> list[dict]:
    """One row per device for the policy of the evaluation checkpoint ``path`` (see the module docstring)."""
    policy, checkpoint = load_policy(path, n_action_steps=1)
    observation = observation_of(policy, checkpoint.features)
    del checkpoint  # a second copy of the weights (1 GB for the default diffusion)
    kind, steps = policy.spec.kind, policy.spec.n_obs_steps
    peer = export_lerobot_policy(path, path.with_suffix(".lerobot")) if kind in EXPORTABLE else None
    base = {"case": case, "kind": kind, "parameters": sum(p.numel() for p in policy.parameters()),
            "checkpoint_bytes": checkpoint_bytes(path), "file_bytes": file_bytes}
    rows = []
    for device in devices:
        policy.to(device).reset()
        window = {name: torch.from_numpy(np.repeat(value[None, None], steps, axis=1)).to(device)
                  for name, value in observation.items()}
        setups = {"select_action": lambda: policy.select_action(observation),
                  "bare": lambda: policy.predict_chunk(window)}
        if peer is not None:
            agent = LeRobotAgent(peer, device, n_action_steps=1)
            agent.start([0])
            setups["lerobot"] = lambda: agent.act([observation], [True])
        times = time_calls(setups, repetitions, warmup, device)
        ms = {name: {"median": round(float(np.median(t)), 4), "p99": round(float(np.percentile(t, 99)), 4)}
              for name, t in times.items()}
        ratios = {"select_action_vs_bare": round(ms["select_action"]["median"] / ms["bare"]["median"], 3)}
        if peer is not None:
            ratios["lerobot_vs_select_action"] = round(ms["lerobot"]["median"] / ms["select_action"]["median"], 3)
        rows.append({**base, "device": device, "repetitions": repetitions, "warmup": warmup, "ms": ms,
                     "ratios": ratios})
    return rows


def table_row(machine: dict, row: dict) -> list:
    def cell(name: str) -> str:
        ms = row["ms"].get(name)
        return f"{ms['median']:.3g} / {ms['p99']:.3g}" if ms else "–"

    size = f"{row['checkpoint_bytes'] / 1e6:.3g}"
    if row["file_bytes"] is not None:
        size += f" (file {row['file_bytes'] / 1e6:.3g})"
    device = machine["device"] if row["device"] == "cuda" else "cpu, 1 thread"
    peer = row["ratios"].get("lerobot_vs_select_action")
    return [machine["date"], machine["code_version"], row["case"], device, row["parameters"], size,
            cell("select_action"), cell("bare"), f"{row['ratios']['select_action_vs_bare']:.2f}", cell("lerobot"),
            f"{peer:.2f}" if peer is not None else "–"]


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, help="kinds whose CASES to measure "
                        "(default: all, or none with --checkpoint)")
    parser.add_argument("--skip", nargs="+", choices=list(CASES), default=[], help="cases of --kinds left out "
                        "(diffusion default takes about a minute a call on 1 CPU thread)")
    parser.add_argument("--checkpoint", nargs="+", type=Path, default=[], help="trained runs or checkpoint files")
    parser.add_argument("--repetitions", type=int, default=300, help="timed calls per setup")
    parser.add_argument("--diffusion-repetitions", type=int, default=10, help="timed calls per setup for diffusion")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls per setup first (at most a tenth "
                        "of the repetitions, at least 1)")
    parser.add_argument("--image-size", type=int, default=64, help="camera height and width of the synthetic cases")
    args = parser.parse_args(argv)
    kinds = args.kinds or ([] if args.checkpoint else list(KINDS))
    cases = [case for case, fields in CASES.items() if fields["policy"] in kinds and case not in args.skip]
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    scratch = Path(tempfile.mkdtemp(prefix="robofleet-bench-"))
    try:
        rows = []
        for index, (case, content, file_bytes) in enumerate(checkpoints(args.checkpoint, cases, args.image_size)):
            path = content.write(scratch / str(index))
            diffusion = content.spec.kind == "diffusion"
            del content  # one policy's weights in memory at a time
            repetitions = args.diffusion_repetitions if diffusion else args.repetitions
            warmup = min(args.warmup, max(1, repetitions // 10))
            rows += measure(case, path, file_bytes, repetitions, warmup, devices)
    finally:
        shutil.rmtree(scratch)
        torch.set_num_threads(threads)

    machine = machine_facts()
    result = {"benchmark": "policy_latency", "machine": machine,
              "job": {"task": TASK, "cameras": list(CAMERAS), "image_size": args.image_size, "batch": 1,
                      "cpu_threads": 1, "n_action_steps": 1,
                      "checkpoints": [str(path) for path in args.checkpoint], "cases": cases},
              "rows": rows, "ratios": {f"{row['case']} on {row['device']}": row["ratios"] for row in rows}}
    header = ["date", "code", "case", "device", "parameters", "checkpoint MB", "select_action ms (median / p99)",
              "bare ms (median / p99)", "select/bare", "lerobot ms (median / p99)", "lerobot/select"]
    publish("policy_latency", result, header, [table_row(machine, row) for row in rows], args,
            recorded=not args.checkpoint)
    return result


if __name__ == "__main__":
    main()
