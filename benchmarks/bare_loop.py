"""train/bc.py's training with nothing else: the loop bc.py's own is held against, and the FLOPs of its step.

``built`` makes what bc.py makes of its options: the loaders of train/data.py's
``training_data`` (DataLoader workers included), the policy of ``make_policy`` after the same
seed. ``bare_rate`` then only trains it, with bc.py's AdamW at bc.py's learning rate and its
autocast (train/state.py's ``TrainingState``), in one process: forward, backward and the
optimiser step for each batch, and nothing else: no monitor, step timer, thread count,
gradient clipping, schedule, checkpoint or DDP. benchmarks/train_speed.py's ``bare_*`` setups run it:

    python -m benchmarks.bare_loop --threads 2 --steps 100 --log-interval 20 -- --data FLEET --policy cnn ...

prints one JSON line: samples/s over the steps after the first ``--log-interval`` (the windows
train_speed reads from bc.py's metrics.jsonl) and the time those steps waited for a batch.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from dataclasses import replace

import torch

from benchmarks.flops import step_flops
from core.options import parse_config
from dataset.inputs import is_image
from train.config import TrainConfig
from train.data import StoreActions, TrainingData, training_data
from train.policies.policy import Policy, make_policy
from train.precision import resolve_amp
from train.state import TrainingState


def built(bc_options: list[str]) -> tuple[TrainConfig, TrainingData, Policy]:
    """bc.py's config (its ``--amp`` resolved as a fresh run's), data and policy (on the CPU, in training mode)
    of ``bc_options``, bc.py's options."""
    config = parse_config(TrainConfig, "bc.py's options", bc_options)
    data = training_data(config, StoreActions(), master=True)
    amp, _ = resolve_amp(config.optim.amp, torch.device("cpu"), any(is_image(name) for name in data.spec.features))
    config = replace(config, optim=replace(config.optim, amp=amp))
    torch.manual_seed(config.seed)
    return config, data, make_policy(data.spec, data.stats)


def endless(loader) -> Iterator[dict[str, torch.Tensor]]:
    """``loader``'s batches epoch after epoch, as bc.py reads them."""
    while True:
        yield from loader


def policy_flops(bc_options: list[str]) -> dict[str, float]:
    """``step_flops`` of the policy bc.py trains with ``bc_options``, on one batch of its loader, per sample."""
    config, data, policy = built(bc_options)
    flops = step_flops(policy, next(iter(data.train_loader)))
    per_sample = {key: flops[key] / config.optim.batch_size for key in ("forward", "backward", "total")}
    return per_sample | {"convolution_share": flops["convolution_share"]}


def bare_rate(config: TrainConfig, data: TrainingData, policy: Policy, steps: int, measured_from: int) -> dict:
    """Train ``steps`` optimiser steps of ``--grad-accum`` micro-batches; samples/s over the steps after
    ``measured_from`` and the seconds they waited for batches."""
    optim = config.optim
    state = TrainingState.create(policy, optim, torch.device("cpu"), optim.batch_size * optim.grad_accum)
    batches, waited = endless(data.train_loader), 0.0
    for step in range(steps):
        if step == measured_from:
            start, waited = time.perf_counter(), 0.0
        state.optimizer.zero_grad(set_to_none=True)
        for _ in range(optim.grad_accum):
            fetch = time.perf_counter()
            batch = next(batches)
            waited += time.perf_counter() - fetch
            with state.autocast():
                loss = policy(batch) / optim.grad_accum
            loss.backward()
        state.optimizer.step()
    seconds = time.perf_counter() - start
    samples = (steps - measured_from) * optim.batch_size * optim.grad_accum
    return {"samples_per_s": samples / seconds, "data_wait_s": waited, "seconds": seconds}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--steps", type=int, default=100, help="optimiser steps")
    parser.add_argument("--log-interval", type=int, default=20, help="the steps not measured (warm-up)")
    parser.add_argument("bc_options", nargs="*", help="after --: bc.py's options (--data among them)")
    args = parser.parse_args(argv)
    if args.steps <= args.log_interval:
        parser.error(f"--steps {args.steps} leaves no step after the first --log-interval {args.log_interval}")
    torch.set_num_threads(args.threads)
    config, data, policy = built(args.bc_options)
    result = bare_rate(config, data, policy, args.steps, args.log_interval) | {"amp": config.optim.amp}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
