"""Behaviour cloning on a fleet store, with DistributedDataParallel.

    python train/bc.py --data data/fleet --out runs/bc                       # one process
    torchrun --standalone --nproc_per_node=2 train/bc.py --data data/fleet   # DDP, 2 ranks

DDP is detected from the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK);
the backend follows the device: nccl on GPU, gloo on CPU. Rank 0 alone logs, writes
RUN/metrics.jsonl and writes checkpoints. A run resumes from RUN/checkpoints/last
unless --no-resume, so rerunning the same command (or torchrun --max-restarts)
carries on after a crash, from the start of the epoch the checkpoint was in.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from collect.manifest import write_json_atomic
from dataset import FleetStore
from dataset.episodes import select_episodes, split_episodes
from dataset.loader import make_dataloader
from dataset.stats import fleet_stats
from dataset.windows import FleetWindowDataset, WindowSpec
from sim.cli import code_version, fail, parse_config
from train.checkpoint import latest_checkpoint, load_checkpoint, restore_rng_state, rng_state, save_checkpoint
from train.config import TrainConfig
from train.policy import make_policy, policy_spec


def learning_rate_factor(step: int, warmup_steps: int, max_steps: int) -> float:
    """Linear warmup to 1, then cosine decay to 0.1 at ``max_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def mean_over_ranks(value: float, device: torch.device) -> float:
    if not dist.is_initialized():
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.item() / dist.get_world_size()


@torch.no_grad()
def validation_loss(model: torch.nn.Module, loader, device: torch.device) -> float:
    model.eval()
    losses = [model({k: v.to(device) for k, v in batch.items()}).item() for batch in loader]
    model.train()
    return mean_over_ranks(sum(losses) / max(1, len(losses)), device)


def main(argv: list[str] | None = None) -> None:
    config = parse_config(TrainConfig, __doc__, argv)

    # ----- processes and devices ---------------------------------------------------------------
    ddp = "RANK" in os.environ
    if ddp:
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        rank, world_size = 0, 1
    master = rank == 0
    run = Path(config.out)

    # ----- data ----------------------------------------------------------------------------------------
    try:
        store = FleetStore.open(config.data)
    except (FileNotFoundError, ValueError) as error:
        fail(str(error))
    if master:
        stats = fleet_stats(store)  # rank 0 computes (and caches) first; the others then read the cache
    if ddp:
        dist.barrier()
    if not master:
        stats = fleet_stats(store)
    episodes = select_episodes(store, robots=config.robots or None, sites=config.sites or None)
    train_episodes, val_episodes = split_episodes(episodes, config.val_fraction, seed=config.seed)
    if not train_episodes:
        fail(f"no successful episodes in {config.data} match --robots {config.robots} --sites {config.sites}")
    try:  # the policy's inputs: the state features, plus the cameras for image policies
        spec = policy_spec(config, store.features)
    except ValueError as error:
        fail(str(error))
    window = WindowSpec.of(spec.n_obs_steps, spec.horizon, [*spec.features, "action"], spec.action_start)
    train_loader = make_dataloader(FleetWindowDataset(store, train_episodes, window, mode=config.mode),
                                   batch_size=config.batch_size, seed=config.seed)
    val_loader = None
    if val_episodes:
        val_loader = make_dataloader(FleetWindowDataset(store, val_episodes, window, mode=config.mode),
                                     batch_size=config.batch_size, shuffle=False, drop_last=False)

    # ----- model and optimiser -------------------------------------------------------------------------
    torch.manual_seed(config.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    try:
        policy = make_policy(spec, stats).to(device)
    except ValueError as error:
        fail(str(error))
    model = DistributedDataParallel(policy) if ddp else policy
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: learning_rate_factor(step, config.warmup_steps, config.max_steps))

    step = 0
    checkpoint_path = latest_checkpoint(run) if config.resume else None
    if checkpoint_path is not None:
        checkpoint = load_checkpoint(checkpoint_path)
        policy.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        restore_rng_state(checkpoint["rng"])
        step = checkpoint["step"]
        train_loader.set_epoch(checkpoint["epoch"] + 1)

    def save(at_step: int) -> None:
        save_checkpoint(run, {
            "policy_spec": spec.to_dict(), "model": policy.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "step": at_step, "epoch": train_loader.epoch - 1,
            "rng": rng_state(), "config": vars(config), "stats": stats, "features": store.features,
            "task": (store.manifest or {}).get("task"), "data": str(store.path), "code_version": code_version(),
        }, at_step, keep=config.keep_checkpoints)

    if master:
        run.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run / "config.json", {"config": vars(config), "policy_spec": spec.to_dict(),
                                                 "world_size": world_size, "code_version": code_version()})
        print(f"training {config.policy} on {len(train_episodes)} episodes ({len(val_episodes)} held out), "
              f"{world_size} rank(s) on {device}, batch "
              f"{config.batch_size} x {config.grad_accum} micro-steps x {world_size} ranks = "
              f"{config.batch_size * config.grad_accum * world_size} windows per step (the effective batch)"
              + (f"; resumed from step {step}" if checkpoint_path else ""))
    metrics = open(run / "metrics.jsonl", "a") if master else None

    # ----- the loop ------------------------------------------------------------------------------------
    batches = iter(train_loader)
    window_start, data_wait, samples = time.perf_counter(), 0.0, 0
    while step < config.max_steps:
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for micro_step in range(config.grad_accum):
            wait_start = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:  # an epoch ends: the next pass reshuffles (set_epoch)
                batches = iter(train_loader)
                batch = next(batches)
            batch = {key: value.to(device, non_blocking=True) for key, value in batch.items()}
            data_wait += time.perf_counter() - wait_start
            # Gradients are all-reduced once per step: on the last micro-step, not on the ones before.
            last_micro_step = micro_step == config.grad_accum - 1
            with model.no_sync() if ddp and not last_micro_step else contextlib.nullcontext():
                loss = model(batch) / config.grad_accum
                loss.backward()
            step_loss += loss.item()
            samples += len(batch["action"]) * world_size
        # The gradients are all-reduced, so their norm is the same on every rank: a NaN loss on
        # any rank makes it NaN everywhere, and all ranks stop together without an extra collective.
        gradient_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(),
                                                       config.grad_clip if config.grad_clip > 0 else math.inf)
        if not math.isfinite(gradient_norm.item()):
            fail(f"loss or gradients are not finite at step {step} (loss {step_loss}); stopping. The last good "
                 f"checkpoint is kept in {run / 'checkpoints'}", code=3)
        optimizer.step()
        scheduler.step()
        step += 1

        record = {}
        if step % config.log_interval == 0 or step == config.max_steps:
            elapsed = time.perf_counter() - window_start
            record = {"step": step, "epoch": train_loader.epoch - 1, "loss": mean_over_ranks(step_loss, device),
                      "lr": scheduler.get_last_lr()[0], "samples_per_s": samples / elapsed,
                      "data_wait_s": data_wait}
            window_start, data_wait, samples = time.perf_counter(), 0.0, 0
        if val_loader is not None and (step % config.val_interval == 0 or step == config.max_steps):
            record = {"step": step, **record, "val_loss": validation_loss(model, val_loader, device)}
        if master and record:
            metrics.write(json.dumps(record) + "\n")
            metrics.flush()
            print(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()))
        if master and (step % config.checkpoint_interval == 0 or step == config.max_steps):
            save(step)

    # ----- the end -------------------------------------------------------------------------------------
    if ddp:  # a cheap guard: every rank must hold the same weights
        digest = torch.stack([p.detach().double().sum() for p in policy.parameters()]).sum().reshape(1)
        digests = [torch.zeros_like(digest) for _ in range(world_size)]
        dist.all_gather(digests, digest)
        in_sync = all(torch.equal(d, digests[0]) for d in digests)
        if master:
            metrics.write(json.dumps({"step": step, "ranks_in_sync": in_sync, "world_size": world_size}) + "\n")
        dist.destroy_process_group()
    if master:
        metrics.close()
        print(f"done: {run / 'checkpoints' / 'last'}")


if __name__ == "__main__":
    main()
