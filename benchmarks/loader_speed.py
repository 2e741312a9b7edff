"""How fast training windows reach the model, held against the limit and the peer.

Every setup serves the same shuffled low-dim windows of one collected fleet:
``observation.state`` and ``observation.environment_state`` over ``n_obs_steps=2``,
``action`` over ``horizon=16``, with their padding masks, in batches of ``--batch-size``.

- ``numpy_limit``: a plain numpy gather from arrays already in RAM, in this process:
  random sample ids, clipped window indices, one fancy index per feature. No
  masks, no tensors, no DataLoader: the limit.
- ``memory`` / ``streaming``: ``make_dataloader`` over ``FleetWindowDataset`` in its
  two modes, with 0 and 2 DataLoader workers. ``streaming_small_cache`` gives the
  streaming cache a quarter of the data, so most chunk reads miss.
- ``lerobot``: ``LeRobotDataset`` with ``delta_timestamps`` on a copy exported by
  ``dataset export-lerobot``, in a DataLoader with 0 and 2 workers: what users run today.

``--cameras front wrist`` adds the cameras to every window (uint8, as they are stored and
as the loader hands them to the policy; the LeRobot copy decodes its PNG frames):
image windows/s, written to loader_speed_image.json and its own table.

Worker start-up is excluded (each loader is warmed up first). The CPU speed of a
shared VM drifts, so every round measures all setups back to back, ratios are taken
within a round, and the table shows the median ratio over ``--rounds`` (rates: the
best round). Writes benchmarks/results/loader_speed.json and a row in benchmarks/README.md.

    python -m benchmarks.loader_speed [--robots 20] [--episodes 10] [--rounds 3]
    python -m benchmarks.loader_speed --cameras front wrist [--image-size 96] [--batch-size 32]
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from pathlib import Path

import sim  # noqa: F401  (first: it selects headless rendering before mujoco loads)

import numpy as np
import torch

from benchmarks.common import benchmark_parser, job_options, machine_facts, median_ratio, publish
from collect import CollectConfig
from collect.engine import run_collection
from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset.loader import make_dataloader
from dataset.lerobot_io import export_lerobot
from dataset.windows import FleetWindowDataset, WindowSpec

N_OBS_STEPS, HORIZON = 2, 16
STATE_FEATURES = ("observation.state", "observation.environment_state", "action")


def samples_per_second(batches, batch_size: int, seconds: float, warmup: int = 2) -> float:
    """Samples per second drawn from the endless iterator ``batches``, after ``warmup`` batches."""
    for _ in range(warmup):
        next(batches)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        next(batches)
        count += batch_size
    return count / (time.perf_counter() - start)


def endless(loader):
    """Batches from every epoch of ``loader``, one after another."""
    while True:
        yield from loader


def numpy_limit_batches(store: FleetStore, features: tuple[str, ...], batch_size: int):
    """The limit: windows gathered with numpy from arrays in RAM (no masks, no torch)."""
    shards = [store.shards[robot] for robot in store.robots]
    arrays = {name: np.concatenate([s.group[f"data/{name}"][: s.num_frames] for s in shards]) for name in features}
    offsets = np.cumsum([0] + [s.num_frames for s in shards[:-1]])
    ends = np.concatenate([offset + s.episode_ends for offset, s in zip(offsets, shards)])
    starts = np.concatenate([[0], ends[:-1]])
    lengths = ends - starts
    first, last = np.repeat(starts, lengths), np.repeat(ends - 1, lengths)
    observation_deltas, action_deltas = np.arange(1 - N_OBS_STEPS, 1), np.arange(HORIZON)
    rng = np.random.default_rng(0)
    while True:
        samples = rng.integers(0, len(first), batch_size)
        lo, hi = first[samples, None], last[samples, None]
        current = np.arange(len(first))[samples, None]
        observation_rows = np.clip(current + observation_deltas, lo, hi)
        action_rows = np.clip(current + action_deltas, lo, hi)
        yield {name: arrays[name][action_rows if name == "action" else observation_rows] for name in features}


def lerobot_loader(root: Path, features: tuple[str, ...], fps: int, batch_size: int, workers: int):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    observation_times = [step / fps for step in range(1 - N_OBS_STEPS, 1)]
    delta_timestamps = {name: observation_times for name in features if name != "action"}
    delta_timestamps["action"] = [step / fps for step in range(HORIZON)]
    dataset = LeRobotDataset(f"robofleet/{root.name}", root=root, delta_timestamps=delta_timestamps)
    options = {"persistent_workers": True, "prefetch_factor": 4} if workers else {}
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                                       drop_last=True, **options)


def build_setups(store: FleetStore, features: tuple[str, ...], lerobot_root: Path, batch_size: int) -> dict:
    """Every setup as an endless batch iterator, ready to time."""
    episodes = select_episodes(store)
    spec = WindowSpec.of(N_OBS_STEPS, HORIZON, features)
    data_bytes = sum(store.shards[r].group[f"data/{name}"].nbytes for r in store.robots for name in features)
    datasets = {
        "memory": FleetWindowDataset(store, episodes, spec, mode="memory"),
        "streaming": FleetWindowDataset(store, episodes, spec, mode="streaming"),
        "streaming_small_cache": FleetWindowDataset(store, episodes, spec, mode="streaming",
                                                    cache_bytes=data_bytes // 4),
    }
    setups = {"numpy_limit": numpy_limit_batches(store, features, batch_size)}
    for (name, dataset), workers in itertools.product(datasets.items(), (0, 2)):
        setups[f"{name}_w{workers}"] = endless(make_dataloader(dataset, batch_size, num_workers=workers))
    for workers in (0, 2):
        loader = lerobot_loader(lerobot_root, features, store.manifest["fps"], batch_size, workers)
        setups[f"lerobot_w{workers}"] = endless(loader)
    return setups


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--robots", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--batch-size", type=int, help="windows per batch (default 256, 32 with --cameras)")
    parser.add_argument("--cameras", nargs="*", default=[], help="also load these cameras' images")
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed per setup per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    args.batch_size = args.batch_size or (32 if args.cameras else 256)
    name = "loader_speed_image" if args.cameras else "loader_speed"
    features = (*STATE_FEATURES, *(f"observation.images.{camera}" for camera in args.cameras))

    work = Path(tempfile.mkdtemp(prefix="robofleet-loader-bench-"))
    try:
        run_collection(CollectConfig(robots=args.robots, episodes=args.episodes, task=args.task,
                                     out=str(work / "fleet"), cameras=tuple(args.cameras), image_size=args.image_size,
                                     quiet=True))
        store = FleetStore.open(work / "fleet")
        export_lerobot(store, work / "lerobot", progress=False,
                       inputs="state+cameras" if args.cameras else "state")  # the features both loaders read
        setups = build_setups(store, features, work / "lerobot", args.batch_size)
        rounds = [{name: samples_per_second(batches, args.batch_size, args.seconds) for name, batches in setups.items()}
                  for _ in range(args.rounds)]
    finally:
        shutil.rmtree(work)

    ratios = {f"memory_w{w}_vs_numpy_limit": median_ratio(rounds, f"memory_w{w}", "numpy_limit") for w in (0, 2)}
    ratios.update({f"{mode}_w{w}_vs_lerobot_w{w}": median_ratio(rounds, f"{mode}_w{w}", f"lerobot_w{w}")
                   for mode in ("streaming", "streaming_small_cache") for w in (0, 2)})
    best = {name: max(r[name] for r in rounds) for name in rounds[0]}
    machine = machine_facts()
    result = {
        "benchmark": name, "machine": machine,
        "job": job_options(args) | {"n_obs_steps": N_OBS_STEPS, "horizon": HORIZON,
                                  "frames": store.num_frames},
        "samples_per_s_best": {name: round(rate) for name, rate in best.items()},
        "samples_per_s_rounds": [{name: round(rate) for name, rate in r.items()} for r in rounds],
        "ratios": {name: round(value, 3) for name, value in ratios.items()},
    }
    header = ["date", "code", "frames", "numpy limit", "memory w0", "memory w2", "streaming w0", "streaming w2",
              "small cache w0", "small cache w2", "lerobot w0", "lerobot w2",
              "memory/limit w0", "memory/limit w2", "stream/lerobot w0", "stream/lerobot w2",
              "small/lerobot w0", "small/lerobot w2"]
    columns = ["numpy_limit", "memory_w0", "memory_w2", "streaming_w0", "streaming_w2", "streaming_small_cache_w0",
               "streaming_small_cache_w2", "lerobot_w0", "lerobot_w2"]
    row = [machine["date"], machine["code_version"], store.num_frames, *(round(best[name]) for name in columns),
           *(f"{value:.2f}" if value < 10 else f"{value:.0f}" for value in ratios.values())]
    publish(name, result, header, [row], args)
    return result


if __name__ == "__main__":
    main()
