"""Behaviour cloning on a fleet store, with DistributedDataParallel.

    python train/bc.py --data data/fleet --out runs/bc                       # one process
    torchrun --standalone --nproc_per_node=2 train/bc.py --data data/fleet   # DDP, 2 ranks

DDP is detected from the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK);
the backend follows the device: nccl on GPU, gloo on CPU. Gradients travel through the
comm hook of --comm-hook (train/comm/comm_hooks.py). Rank 0 alone logs (train/monitor.py:
progress lines, RUN/metrics.jsonl with the data-wait, compute and communication times,
TensorBoard, optional Weights & Biases, RUN/training_curve.png) and writes checkpoints.
A run resumes from RUN/checkpoints/last unless --no-resume (from the newest older one
that loads, with a warning, where that one is broken), so rerunning the same command (or
torchrun --max-restarts) carries on after a crash or Ctrl-C, from the start of the epoch
after the checkpoint's. docs/training.md is the guide.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import math
import os
import sys
import time
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

from train.restarts import end_if_failed_before, failures_remembered

if __name__ == "__main__":  # a torchrun restart of inputs that failed before ends here, before torch loads (seconds)
    end_if_failed_before(sys.argv[1:])

import torch  # noqa: E402
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from core.errors import fail, warn
from core.files import code_version, repo_relative, write_json_atomic
from core.options import parse_config
from dataset.chunks import DataError, data_error_line
from dataset.episodes import select_episodes, split_episodes
from dataset.loader import make_dataloader
from dataset.stats import fleet_stats
from dataset.windows import FleetWindowDataset, WindowSpec
from train.checkpoint import Checkpoint, latest_checkpoint, newest_intact_checkpoint, restore_rng_state, rng_state
from train.comm.comm_hooks import register_comm_hook
from train.config import TrainConfig
from train.data import open_training_store
from train.identity import check_resume, data_identity
from train.monitor import Monitor, StepTimer, sync_efficiency
from train.policies.policy import PolicySpec, changed_spec_fields, make_policy, policy_spec
from train.schedule import Schedule, adamw, scaled_learning_rate
from train.threads import ThreadShare


def mean_over_ranks(values: dict[str, float], device: torch.device) -> dict[str, float]:
    """Each value averaged over the ranks, in one all-reduce (as it is in one process)."""
    if not dist.is_initialized():
        return values
    tensor = torch.tensor(list(values.values()), dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return dict(zip(values, (tensor / dist.get_world_size()).tolist()))


def on_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


@torch.no_grad()
def validation_loss(model: torch.nn.Module, loader, device: torch.device, labeller=None) -> float:
    model.eval()
    labelled = labeller or (lambda batch: batch)
    losses = [model(labelled(on_device(batch, device))).item() for batch in loader]
    model.train()
    return mean_over_ranks({"val_loss": sum(losses) / max(1, len(losses))}, device)["val_loss"]


def join_process_group(timeout: timedelta | None = None) -> torch.device:
    """This rank's device (its GPU, else the CPU), with the process group joined unless it already is:
    nccl on GPU, gloo on CPU, ``timeout`` for its collectives (default torch's)."""
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timeout)
    return device


def resume_from(config: TrainConfig, run: Path, spec: PolicySpec, identity: dict, quiet: bool) -> Checkpoint | None:
    """The checkpoint (with its resume state) that the run in ``run`` carries on from; None to start afresh.

    Every rank walks the same files to the same checkpoint; unless ``quiet`` (rank 0), it warns
    of those it skips and says what the resume changes. What the checkpoint cannot carry on
    (other policy options, data or optimisation options: train/identity.py) is a one-line error.
    """
    try:
        checkpoint = newest_intact_checkpoint(run, training=True, quiet=quiet) if config.resume else None
    except ValueError as error:
        fail(f"{error}; --no-resume starts afresh")
    if checkpoint is None:
        return None
    try:  # the data first: another task's store also changes the policy's spec
        notes = check_resume(checkpoint.config, checkpoint.identity, config, identity, config.allow_new_data)
    except ValueError as error:
        fail(f"cannot resume {run}: {error}")
    if changed := changed_spec_fields(checkpoint.spec, spec):
        fail(f"{run} holds a policy trained with other options ({changed}); rerun with the same options, "
             "or --no-resume to start afresh")
    for note in [] if quiet else notes:
        warn(note)
    return checkpoint


def run_training(config: TrainConfig, labeller=None, until: int | None = None, rewarm: float = 0.0) -> None:
    """Train (or carry on training) the policy of ``config`` in ``config.out``: the whole of bc.py.

    A ``labeller`` adds data and labels (train/distill.py, train/fleet_learn.py): ``labeller.stores``
    are more fleet stores and ``labeller.episodes()`` the episodes of them to train on;
    ``labeller.window(spec)`` is the window the loader reads for a policy of ``spec``;
    ``labeller(batch)`` turns each batch, on the device, into the policy's inputs and the
    actions it is to learn. ``until`` stops at that step instead of ``config.max_steps`` (which still
    shapes the learning-rate schedule); ``rewarm`` > 0 restarts a resumed schedule at that share of
    the peak rate, decaying to 10% at ``until`` (train/fleet_learn.py's rounds).
    """
    # ----- processes and devices ---------------------------------------------------------------
    ddp = "RANK" in os.environ
    owns_process_group = ddp and not dist.is_initialized()  # else the caller's (train/distill.py)
    until = until or config.max_steps
    if ddp:
        device = join_process_group()
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        rank, world_size = 0, 1
    master = rank == 0
    run = Path(config.out)
    threads = ThreadShare(config.threads)
    if config.amp == "fp16" and device.type != "cuda":
        fail("--amp fp16 needs a GPU (a GradScaler guards its float16 gradients there); use --amp bf16 on CPU")
    if config.amp == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        fail(f"--amp bf16 needs a GPU with bfloat16 ({torch.cuda.get_device_name(device)} has none); use --amp fp16")

    # ----- data ----------------------------------------------------------------------------------------
    store = open_training_store(config, quiet=not master)
    try:
        if master:
            stats = fleet_stats(store)  # rank 0 computes (and caches) first; the others then read the cache
        if ddp:
            dist.barrier()
        if not master:
            stats = fleet_stats(store)
    except DataError as error:
        fail(str(error))
    stores = [store, *(labeller.stores if labeller else [])]
    try:
        episodes = select_episodes(store, robots=config.robots or None, sites=config.sites or None,
                                   per_robot=config.episodes_per_robot or None)
        extra = labeller.episodes() if labeller else []  # in the labeller's stores, numbered after --data's
        episodes += [dataclasses.replace(e, store=e.store + 1) for e in extra]
    except DataError as error:
        fail(str(error))
    train_episodes, val_episodes = split_episodes(episodes, config.val_fraction, seed=config.seed)
    if not train_episodes:
        fail(f"no successful episodes in {config.data} match --robots {config.robots} --sites {config.sites}")
    try:  # the policy's inputs (--inputs): which of the store's features it sees
        spec = policy_spec(config, store.features)
    except ValueError as error:
        fail(str(error))
    config.inputs = spec.inputs  # auto resolved: the saved config records what the policy sees
    window = labeller.window(spec) if labeller else WindowSpec.of(spec.n_obs_steps, spec.horizon,
                                                                  [*spec.features, "action"], spec.action_start)
    try:  # too few windows for the batch size or the ranks is a one-line error
        windows = FleetWindowDataset(stores, train_episodes + val_episodes, window, mode=config.mode)  # frames once
        train_loader = make_dataloader(windows.with_episodes(train_episodes), batch_size=config.batch_size,
                                       seed=config.seed)
        val_loader = None
        if val_episodes:
            val_loader = make_dataloader(windows.with_episodes(val_episodes), batch_size=config.batch_size,
                                         shuffle=False, drop_last=False)
    except ValueError as error:
        fail(str(error))

    # ----- model -----------------------------------------------------------------------------------------
    torch.manual_seed(config.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    try:
        policy = make_policy(spec, stats).to(device)
    except ValueError as error:
        fail(str(error))

    # ----- communication -------------------------------------------------------------------------------
    sync_batchnorm_layers = 0
    if ddp and device.type == "cuda":  # batch norm over every rank's samples (SyncBatchNorm is GPU-only)
        policy = torch.nn.SyncBatchNorm.convert_sync_batchnorm(policy)
        sync_batchnorm_layers = sum(isinstance(m, torch.nn.SyncBatchNorm) for m in policy.modules())
    # DDP broadcasts rank 0's buffers before every forward by default. Only BatchNorm's running statistics
    # change in training; the normalisation buffers never do, and the broadcast would be a collective a step.
    # The layers that keep running statistics say so in track_running_stats: every BatchNorm kind (SyncBatchNorm
    # included), and InstanceNorm when asked to.
    running_stats = any(getattr(m, "track_running_stats", False) for m in policy.modules())
    model = policy
    if ddp:
        # A backward pass gives some weights (a 1x1 convolution's) gradients of another memory layout than
        # DDP's bucket, which DDP would copy over with a warning; gradients that exist before DDP wraps the
        # model become views into its bucket, and every backward then accumulates into them in place.
        for parameter in policy.parameters():
            parameter.grad = torch.zeros_like(parameter) if parameter.requires_grad else None
        # gradient_as_bucket_view: each .grad is a view into DDP's bucket, so the backward writes the gradients
        # where the all-reduce reads them instead of copying them in and the averages back.
        model = DistributedDataParallel(policy, bucket_cap_mb=config.bucket_cap_mb,
                                        broadcast_buffers=running_stats, gradient_as_bucket_view=True)
        try:  # PowerSGD sends exact gradients during the warmup, compressed ones after it
            # the hook that runs (auto resolved) is what the saved config records
            config.comm_hook = register_comm_hook(model, config.comm_hook, device, config.powersgd_rank,
                                                  config.warmup_steps)
        except ValueError as error:
            fail(str(error))

    # ----- optimisation --------------------------------------------------------------------------------
    effective_batch = config.batch_size * config.grad_accum * world_size
    lr = scaled_learning_rate(config.lr, config.lr_scaling, effective_batch, config.base_batch)
    optimizer = adamw(policy.parameters(), lr=lr, weight_decay=config.weight_decay)
    schedule = Schedule(config.warmup_steps, config.max_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    autocast = functools.partial(torch.autocast, device.type, enabled=config.amp != "none",
                                 dtype=torch.float16 if config.amp == "fp16" else torch.bfloat16)
    scaler = torch.amp.GradScaler(device.type, enabled=config.amp == "fp16")  # fp16 gradients would underflow
    ema = None
    if config.ema_decay > 0:
        ema = AveragedModel(policy, multi_avg_fn=get_ema_multi_avg_fn(config.ema_decay), use_buffers=True)
    evaluated = ema.module if ema is not None else policy  # what validation and evaluation run

    # ----- resume and checkpoints ------------------------------------------------------------------------
    identity = data_identity(store, [e for e in episodes if e.store == 0])  # --data's, not a labeller's
    resumed = resume_from(config, run, spec, identity, quiet=not master)
    step = 0
    if resumed is not None:
        training = resumed.training
        # With an EMA, the weights hold the average (evaluation runs it) and "ema" the trained weights.
        policy.load_state_dict(training.get("ema", {}).get("trained_model", resumed.weights))
        if ema is not None and "ema" in training:  # else the average starts afresh from these weights
            ema.module.load_state_dict(resumed.weights)
            ema.n_averaged.fill_(training["ema"]["updates"])
        if scaler.is_enabled() and "scaler" in training:
            scaler.load_state_dict(training["scaler"])
        optimizer.load_state_dict(training["optimizer"])
        schedule.max_steps = resumed.config.get("max_steps", config.max_steps)  # restored below where saved
        scheduler.load_state_dict(training["scheduler"])
        lr = scheduler.base_lrs[0]  # the checkpoint's, even if the world size changed
        restore_rng_state(training["rng"])
        step, stats = resumed.step, resumed.stats  # its normalisation, also on new data (--allow-new-data)
        train_loader.set_epoch(resumed.epoch + 1)

    def save(at_step: int) -> None:
        training = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()}
        if ema is not None:
            training["ema"] = {"decay": config.ema_decay, "updates": int(ema.n_averaged),
                               "trained_model": policy.state_dict()}
        if scaler.is_enabled():
            training["scaler"] = scaler.state_dict()
        Checkpoint(spec=spec, weights=evaluated.state_dict(), stats=stats, features=store.features, step=at_step,
                   task=(store.manifest or {}).get("task"), epoch=train_loader.epoch - 1, config=asdict(config),
                   data=repo_relative(store.path), identity=identity, code_version=code_version(),
                   training=training).save(run, keep=config.keep_checkpoints)

    extended = ""
    if resumed and rewarm:
        extended = f" (the learning rate restarts at {lr * rewarm:.3g} and decays to 10% at step {until})"
        schedule.restart(step, until, rewarm)
    elif schedule.max_steps != config.max_steps:  # a resume with another --max-steps
        extended = (f" (--max-steps {config.max_steps}, was {schedule.max_steps}: the learning rate carries on from "
                    f"{lr * schedule(step):.3g} and decays to 10% at the new end)")
        schedule.extend(step, config.max_steps)
    threads.refresh(force=True)  # the other ranks have registered by now: the start line counts them
    if master:
        run.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run / "config.json", {"config": asdict(config), "policy_spec": spec.to_dict(),
                                                 "world_size": world_size, "effective_batch": effective_batch,
                                                 "lr": lr, "sync_batchnorm_layers": sync_batchnorm_layers,
                                                 "code_version": code_version()})
        print(f"training {config.policy} on {spec.inputs} ({', '.join(spec.features)}) from "
              f"{len(train_episodes)} episodes ({len(val_episodes)} held out), "
              f"{world_size} rank(s) on {device}, batch "
              f"{config.batch_size} x {config.grad_accum} micro-steps x {world_size} ranks = "
              f"{effective_batch} windows per step (the effective batch); lr {lr:.4g} ({config.lr:.4g} "
              f"for batch {config.base_batch}, scaling {config.lr_scaling}); amp {config.amp}, "
              f"comm hook {config.comm_hook if ddp else 'none (one process)'}, "
              f"ema {config.ema_decay or 'off'}; {threads.describe()}"
              + (f"; {sync_batchnorm_layers} SyncBatchNorm layers" if sync_batchnorm_layers else "")
              + (f"; resumed from step {step}" if resumed else "") + extended + (f"; {labeller}" if labeller else ""))
    monitor = Monitor(run, config, start_step=step, oversubscription=threads.oversubscription) if master else None
    timer = StepTimer(policy, device)

    # ----- the loop ------------------------------------------------------------------------------------
    first_step, started = step, time.perf_counter()
    images_per_sample = spec.n_obs_steps * sum(store.features[name]["dtype"] == "image" for name in spec.features)
    window_loss, window_steps = 0.0, 0  # the logged loss is the mean over the log window
    batches = iter(train_loader)
    while step < until:
        threads.refresh()
        optimizer.zero_grad(set_to_none=not ddp)  # under DDP, zeroed in place: the gradients stay bucket views
        step_loss = 0.0
        for micro_step in range(config.grad_accum):
            timer.fetch_start()
            try:
                batch = next(batches)
            except StopIteration:  # an epoch ends: the next pass reshuffles (set_epoch)
                batches = iter(train_loader)
                batch = next(batches)
            except DataError as error:  # a chunk that streaming mode found damaged or missing
                fail(data_error_line(error))
            batch = on_device(batch, device)
            timer.fetch_done()
            if labeller is not None:  # the teacher's forward pass: counted as compute, not as data wait
                batch = labeller(batch)
            # Gradients are all-reduced once per step: on the last micro-step, not on the ones before.
            last_micro_step = micro_step == config.grad_accum - 1
            with model.no_sync() if ddp and not last_micro_step else contextlib.nullcontext():
                with autocast():
                    loss = model(batch) / config.grad_accum
                scaler.scale(loss).backward()  # the scaler passes the loss through unless --amp fp16
            timer.backward_done(synced=ddp and last_micro_step)
            step_loss += loss.item()
        scaler.unscale_(optimizer)  # clip the true gradients
        gradient_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(),
                                                       config.grad_clip if config.grad_clip > 0 else math.inf)
        # The gradients are all-reduced, so their norm is the same on every rank: a NaN loss on any
        # rank makes it NaN everywhere, and all ranks stop together without an extra collective.
        # Under fp16 an overflow is routine: the scaler skips that step and halves its scale, until
        # even a scale below 1 overflows.
        scaler_backs_off = scaler.is_enabled() and scaler.get_scale() >= 1.0
        if not math.isfinite(gradient_norm.item()) and not scaler_backs_off:
            fail(f"loss or gradients are not finite at step {step} (loss {step_loss}); stopping. The last good "
                 f"checkpoint is kept in {run / 'checkpoints'}", code=3)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        if ema is not None:
            ema.update_parameters(policy)
        step += 1
        timer.step_done(samples=effective_batch)
        window_loss, window_steps = window_loss + step_loss, window_steps + 1

        record = {}
        if step % config.log_interval == 0 or step == until:
            window = mean_over_ranks({"loss": window_loss / window_steps, **timer.window()}, device)
            window_loss, window_steps = 0.0, 0
            busy = window["data_wait_s"] + window["compute_s"] + window["communication_s"]
            record = {"step": step, "epoch": train_loader.epoch - 1, "loss": window["loss"],
                      "lr": scheduler.get_last_lr()[0], "samples_per_s": window["samples"] / busy,
                      "data_wait_s": window["data_wait_s"], "compute_s": window["compute_s"],
                      "communication_s": window["communication_s"],
                      "sync_efficiency": sync_efficiency(window["compute_s"], window["communication_s"])}
        if val_loader is not None and (step % config.val_interval == 0 or step == until):
            with autocast():
                record = {"step": step, **record, "val_loss": validation_loss(evaluated, val_loader, device, labeller)}
        if master and record:
            monitor.log(record)
        if master and (step % config.checkpoint_interval == 0 or step == until):
            save(step)

    # ----- the end -------------------------------------------------------------------------------------
    seconds = time.perf_counter() - started
    if ddp and step > first_step:  # a cheap guard: every rank must hold the same weights (and the same average)
        weights = [*policy.parameters(), *(ema.parameters() if ema is not None else [])]
        digest = torch.stack([p.detach().double().sum() for p in weights]).sum().reshape(1)
        digests = [torch.zeros_like(digest) for _ in range(world_size)]
        dist.all_gather(digests, digest)
        in_sync = all(torch.equal(d, digests[0]) for d in digests)
        if master:
            monitor.log({"step": step, "ranks_in_sync": in_sync, "world_size": world_size})
    if ddp:
        # A DDP with a Python comm hook that outlives the process group can make torch abort at exit
        # ("terminate called without an active exception"; rarely, but then torchrun reports a failed run).
        del model
        gc.collect()
        if owns_process_group:
            dist.destroy_process_group()
    threads.close()
    if master:
        monitor.close()
        print(monitor.summary(first_step, step, seconds, effective_batch, images_per_sample,
                              run / "checkpoints" / "last") if step > first_step
              else f"nothing to do: {run} is trained to step {step} (of {until})")


def main(argv: list[str] | None = None) -> None:
    config = parse_config(TrainConfig, __doc__, argv)
    try:
        with failures_remembered(sys.argv[1:] if argv is None else argv):
            run_training(config)
    except KeyboardInterrupt:  # Ctrl-C reaches every rank; rank 0 says where the run stands
        if int(os.environ.get("RANK", "0")) == 0:
            last = latest_checkpoint(Path(config.out))
            print(f"\ninterrupted: {last or 'no checkpoint yet'} is kept; rerun the same command to resume",
                  file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
