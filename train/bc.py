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
after the checkpoint's. docs/training.md is the guide; docs/distributed.md covers communication and restarts.

``run_training`` reads top to bottom: the data (train/data.py), the policy and its DDP
wrapper, the training state (train/state.py), then ``update`` once a step. Bad input of
any kind is a ``ValueError`` on its way up, which ``main`` turns into one line.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path

from train.restarts import end_if_failed_before, failures_remembered

if __name__ == "__main__":  # a torchrun restart of inputs that failed before ends here, before torch loads (seconds)
    end_if_failed_before(sys.argv[1:])

import torch  # noqa: E402
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from core.errors import fail, quiet_closed_pipes
from core.lock import output_lock
from core.files import code_version, repo_relative, write_json_atomic
from core.options import parse_config
from dataset.chunks import DataError, data_error_line
from dataset.inputs import is_image
from train.checkpoint import latest_checkpoint
from train.comm.comm_hooks import register_comm_hook
from train.config import OptimConfig, TrainConfig, flat_options
from train.data import Labeller, StoreActions, training_data
from train.identity import collections_trained_on
from train.monitor import Monitor, StepTimer, sync_efficiency
from train.policies.policy import Policy, make_policy
from train.precision import check_amp, resolve_amp
from train.state import TrainingState, resume_from
from train.threads import ThreadShare

Batch = dict[str, torch.Tensor]


def mean_over_ranks(values: dict[str, float], device: torch.device) -> dict[str, float]:
    """Each value averaged over the ranks, in one all-reduce (as it is in one process)."""
    if not dist.is_initialized():
        return values
    tensor = torch.tensor(list(values.values()), dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return dict(zip(values, (tensor / dist.get_world_size()).tolist()))


def on_device(batch: Batch, device: torch.device) -> Batch:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


@torch.no_grad()
def validation_loss(model: torch.nn.Module, loader, device: torch.device, labeller: Labeller) -> float:
    """The mean loss of ``model`` over ``loader``'s batches, averaged over the ranks."""
    model.eval()
    losses = [model(labeller(on_device(batch, device))).item() for batch in loader]
    model.train()
    return mean_over_ranks({"val_loss": sum(losses) / max(1, len(losses))}, device)["val_loss"]


def join_process_group(timeout: timedelta | None = None) -> torch.device:
    """This rank's device (its GPU, else the CPU), with the process group joined unless it already is:
    nccl on GPU, gloo on CPU, ``timeout`` for its collectives (default torch's)."""
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist.is_initialized():
        return device
    backend = "nccl" if device.type == "cuda" else "gloo"
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        dist.init_process_group(backend, store=attempt_store(timeout or dist.constants.default_pg_timeout),
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)
    else:  # another launcher, or TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (several hosts): rank 0 serves the store
        dist.init_process_group(backend, timeout=timeout)
    return device


def attempt_store(timeout: timedelta) -> dist.Store:
    """This torchrun attempt's part of the store torchrun's agent serves at MASTER_PORT.

    The agent binds that port (any free one) and holds it before a worker starts, so two jobs on one
    host never race for it, as they do where rank 0 binds a port the agent found free and let go
    (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1). The store outlives a restart, though, and the keys of the
    attempt before (the dead ranks' addresses) would send a restarted attempt's ranks to connect to
    them, or hang (pytorch/pytorch#135712): each attempt keeps to the keys under its number. Every
    rank counts the attempts alike where one agent restarts them all: on one host."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timeout)
    return dist.PrefixStore(f"attempt_{os.environ['TORCHELASTIC_RESTART_COUNT']}", store)


def wrap_ddp(policy: Policy, config: TrainConfig, device: torch.device) -> tuple[DistributedDataParallel, str, int]:
    """``policy`` under DDP with the comm hook of ``--comm-hook``: the wrapper, the hook that runs
    (``auto`` resolved) and the number of SyncBatchNorm layers (GPU only)."""
    sync_batchnorm_layers = 0
    if device.type == "cuda":  # batch norm over every rank's samples (SyncBatchNorm is GPU-only)
        policy = torch.nn.SyncBatchNorm.convert_sync_batchnorm(policy)
        sync_batchnorm_layers = sum(isinstance(m, torch.nn.SyncBatchNorm) for m in policy.modules())
    # DDP broadcasts rank 0's buffers before every forward by default. Only BatchNorm's running statistics
    # change in training; the normalisation buffers never do, and the broadcast would be a collective a step.
    # The layers that keep running statistics say so in track_running_stats: every BatchNorm kind (SyncBatchNorm
    # included), and InstanceNorm when asked to.
    running_stats = any(getattr(m, "track_running_stats", False) for m in policy.modules())
    # A backward pass gives some weights (a 1x1 convolution's) gradients of another memory layout than
    # DDP's bucket, which DDP would copy over with a warning; gradients that exist before DDP wraps the
    # model become views into its bucket, and every backward then accumulates into them in place.
    for parameter in policy.parameters():
        parameter.grad = torch.zeros_like(parameter) if parameter.requires_grad else None
    # gradient_as_bucket_view: each .grad is a view into DDP's bucket, so the backward writes the gradients
    # where the all-reduce reads them instead of copying them in and the averages back.
    model = DistributedDataParallel(policy, bucket_cap_mb=config.ddp.bucket_cap_mb,
                                    broadcast_buffers=running_stats, gradient_as_bucket_view=True)
    # PowerSGD sends exact gradients during the warmup, compressed ones after it
    hook = register_comm_hook(model, config.ddp.comm_hook, device, config.ddp.powersgd_rank,
                              config.optim.warmup_steps)
    return model, hook, sync_batchnorm_layers


def training_batches(loader, device: torch.device, labeller: Labeller, timer: StepTimer) -> Iterator[Batch]:
    """``loader``'s batches epoch after epoch (each pass reshuffles), on ``device`` and labelled; the
    timer counts the fetch as data wait and the labeller (a teacher's forward pass) as compute."""
    batches = iter(loader)
    while True:
        timer.fetch_start()
        try:
            batch = next(batches)
        except StopIteration:  # an epoch ends: the next pass reshuffles (set_epoch)
            batches = iter(loader)
            batch = next(batches)
        batch = on_device(batch, device)
        timer.fetch_done()
        yield labeller(batch)


def update(model: torch.nn.Module, state: TrainingState, batches: Iterator[Batch], optim: OptimConfig,
           timer: StepTimer) -> float:
    """One optimiser step of ``state`` over ``--grad-accum`` micro-batches: forward, backward, gradient
    clipping, the optimiser, scheduler and EMA steps. Returns the step's loss; a loss or gradients
    that are not finite raise ``FloatingPointError`` (the run's last good checkpoint is kept)."""
    ddp = isinstance(model, DistributedDataParallel)
    state.optimizer.zero_grad(set_to_none=not ddp)  # under DDP, zeroed in place: the gradients stay bucket views
    step_loss = 0.0
    for micro_step in range(optim.grad_accum):
        batch = next(batches)
        # Gradients are all-reduced once per step: on the last micro-step, not on the ones before.
        last_micro_step = micro_step == optim.grad_accum - 1
        with model.no_sync() if ddp and not last_micro_step else contextlib.nullcontext():
            with state.autocast():
                loss = model(batch) / optim.grad_accum
            state.scaler.scale(loss).backward()  # the scaler passes the loss through unless --amp fp16
        timer.backward_done(synced=ddp and last_micro_step)
        step_loss += loss.item()
    state.scaler.unscale_(state.optimizer)  # clip the true gradients
    gradient_norm = torch.nn.utils.get_total_norm([p.grad for p in state.policy.parameters() if p.grad is not None])
    norm = gradient_norm.item()
    # The gradients are all-reduced, so their norm is the same on every rank: a NaN loss on any
    # rank makes it NaN everywhere, and all ranks stop together without an extra collective.
    # Under fp16 an overflow is routine: the scaler skips that step and halves its scale, until
    # even a scale below 1 overflows.
    scaler_backs_off = state.scaler.is_enabled() and state.scaler.get_scale() >= 1.0
    if not math.isfinite(norm) and not scaler_backs_off:
        raise FloatingPointError(f"loss or gradients are not finite at step {state.step} (loss {step_loss}); stopping")
    # Clipped only where the norm is over the bound (clip_grad_norm_ scales every gradient, by 1 below it): on
    # a busy CPU that parallel pass over the gradients cost the cnn 45 ms a step on 2 threads (docs/performance.md).
    if optim.grad_clip > 0 and norm + 1e-6 > optim.grad_clip:
        torch.nn.utils.clip_grads_with_norm_(state.policy.parameters(), optim.grad_clip, gradient_norm)
    state.scaler.step(state.optimizer)
    state.scaler.update()
    state.scheduler.step()
    if state.ema is not None:
        state.ema.update_parameters(state.policy)
    state.step += 1
    return step_loss


def progress(losses: list[float], timer: StepTimer, state: TrainingState, epoch: int, device: torch.device) -> dict:
    """The record of a log window: its mean loss, the learning rate, throughput and where the time went."""
    window = mean_over_ranks({"loss": sum(losses) / len(losses), **timer.window()}, device)
    busy = window["data_wait_s"] + window["compute_s"] + window["communication_s"]
    return {"step": state.step, "epoch": epoch, "loss": window["loss"], "lr": state.scheduler.get_last_lr()[0],
            "samples_per_s": window["samples"] / busy, "data_wait_s": window["data_wait_s"],
            "compute_s": window["compute_s"], "communication_s": window["communication_s"],
            "sync_efficiency": sync_efficiency(window["compute_s"], window["communication_s"])}


def ranks_in_sync(state: TrainingState, world_size: int) -> bool:
    """A cheap guard at the end: whether every rank holds the same weights (and the same average)."""
    weights = [*state.policy.parameters(), *(state.ema.parameters() if state.ema is not None else [])]
    digest = torch.stack([p.detach().double().sum() for p in weights]).sum().reshape(1)
    digests = [torch.zeros_like(digest) for _ in range(world_size)]
    dist.all_gather(digests, digest)
    return all(torch.equal(d, digests[0]) for d in digests)


def run_training(config: TrainConfig, labeller: Labeller | None = None, until: int | None = None,
                 rewarm: float = 0.0) -> None:
    """Train (or carry on training) the policy of ``config`` in ``config.out``: the whole of bc.py.

    ``labeller`` (train/data.py's ``Labeller``; default: the store's actions) adds data and labels
    (train/distill.py, train/fleet_learn.py). ``until`` stops at that step instead of ``--max-steps``
    (which still shapes the learning-rate schedule); ``rewarm`` > 0 restarts a resumed schedule at that
    share of the peak rate, decaying to 10% at ``until`` (train/fleet_learn.py's rounds). ``config`` is
    never changed: what the run resolves (inputs, comm hook) is saved beside it.
    """
    ddp = "RANK" in os.environ
    owns_process_group = ddp and not dist.is_initialized()  # else the caller's (train/distill.py)
    device = join_process_group() if ddp else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if ddp else (0, 1)
    optim, log = config.optim, config.log
    check_amp(optim.amp, device)
    master, run, until, labeller = rank == 0, Path(config.out), until or optim.max_steps, labeller or StoreActions()
    with ThreadShare(config.ddp.threads) as threads:
        data = training_data(config, labeller, master)

        torch.manual_seed(config.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
        policy = make_policy(data.spec, data.stats).to(device)
        model, comm_hook, sync_batchnorm_layers = wrap_ddp(policy, config, device) if ddp else (policy, "", 0)
        effective_batch = optim.batch_size * optim.grad_accum * world_size
        resumed = resume_from(config, data.spec, data.identity, quiet=not master)
        amp, amp_reason = resolve_amp(optim.amp, device, any(is_image(name) for name in data.spec.features),
                                      flat_options(resumed.config).get("amp") if resumed else None)
        check_amp(amp, device)  # again: a resume's may be a GPU's fp16
        optim = replace(optim, amp=amp)
        state = TrainingState.create(policy, optim, device, effective_batch)
        if config.init_encoders and resumed is None:  # a resume carries on its own weights
            from train.encoder_pretrain import load_encoders  # here: it imports torchvision, which mlp runs skip

            # in place, on every rank alike: DDP, the optimiser and an EMA's first update all see these tensors
            load_encoders(policy, Path(config.init_encoders))
        schedule_note = ""
        if resumed is not None:
            schedule_note = state.resume(resumed, optim.max_steps, until, rewarm)
            data.stats = resumed.stats  # its normalisation, also on new data (--allow-new-data)
            data.train_loader.set_epoch(resumed.epoch + 1)
        resolved = asdict(config)  # with what the run resolved: inputs and window, the hook that runs, the precision
        resolved["policy"].update(inputs=data.spec.inputs, n_obs_steps=data.spec.n_obs_steps)
        resolved["ddp"]["comm_hook"] = comm_hook or config.ddp.comm_hook
        resolved["optim"]["amp"] = amp
        about = {"spec": data.spec, "stats": data.stats, "features": data.store.features, "config": resolved,
                 "task": (data.store.manifest or {}).get("task"), "data": repo_relative(data.store.path),
                 "more_data": [repo_relative(store.path) for store in labeller.stores],
                 "identity": data.identity, "code_version": code_version(),  # what every checkpoint describes
                 "collections": collections_trained_on(resumed.collections if resumed else [],
                                                       repo_relative(data.store.path), data.identity)}

        threads.refresh(force=True)  # the other ranks have registered by now: the start line counts them
        if master:
            run.mkdir(parents=True, exist_ok=True)
            write_json_atomic(run / "config.json", {"config": resolved, "policy_spec": data.spec.to_dict(),
                                                     "world_size": world_size, "effective_batch": effective_batch,
                                                     "lr": state.lr, "sync_batchnorm_layers": sync_batchnorm_layers,
                                                     "code_version": about["code_version"]})
            print(f"training {config.policy.policy} on {data.describe()}, {world_size} rank(s) on {device}, batch "
                  f"{optim.batch_size} x {optim.grad_accum} micro-steps x {world_size} ranks = "
                  f"{effective_batch} windows per step (the effective batch); lr {state.lr:.4g} ({optim.lr:.4g} "
                  f"for batch {optim.base_batch}, scaling {optim.lr_scaling}); amp {amp}"
                  f"{f' ({amp_reason})' if amp_reason else ''}, "
                  f"comm hook {comm_hook or 'none (one process)'}, ema {optim.ema_decay or 'off'}; {threads.describe()}"
                  + (f"; {sync_batchnorm_layers} SyncBatchNorm layers" if sync_batchnorm_layers else "")
                  + (f"; resumed from step {state.step}" if resumed else "") + schedule_note
                  + (f"; {labeller}" if str(labeller) else ""))
        monitor = Monitor(run, config, start_step=state.step,
                          oversubscription=threads.oversubscription) if master else None
        timer = StepTimer(policy, device)
        batches = training_batches(data.train_loader, device, labeller, timer)

        first_step, started, losses = state.step, time.perf_counter(), []  # the logged loss: the log window's mean
        while state.step < until:
            threads.refresh()
            losses.append(update(model, state, batches, optim, timer))
            timer.step_done(samples=effective_batch)
            last, record = state.step == until, {}
            if state.step % log.log_interval == 0 or last:
                record, losses = progress(losses, timer, state, data.train_loader.epoch - 1, device), []
            if data.val_loader is not None and (state.step % log.val_interval == 0 or last):
                with state.autocast():
                    val_loss = validation_loss(state.evaluated, data.val_loader, device, labeller)
                record = {"step": state.step, **record, "val_loss": val_loss}
            if master and record:
                monitor.log(record)
            if master and (state.step % log.checkpoint_interval == 0 or last):
                state.checkpoint(epoch=data.train_loader.epoch - 1, **about).save(run, keep=log.keep_checkpoints)

        seconds = time.perf_counter() - started
        if ddp and state.step > first_step:
            in_sync = ranks_in_sync(state, world_size)
            if master:
                monitor.log({"step": state.step, "ranks_in_sync": in_sync, "world_size": world_size})
        if ddp:
            # A DDP with a Python comm hook that outlives the process group can make torch abort at exit
            # ("terminate called without an active exception"; rarely, but then torchrun reports a failed run).
            del model
            gc.collect()
            if owns_process_group:
                dist.destroy_process_group()
    if master:
        monitor.close()
        images_per_sample = data.spec.n_obs_steps * sum(data.store.features[name]["dtype"] == "image"
                                                        for name in data.spec.features)
        print(monitor.summary(first_step, state.step, seconds, effective_batch, images_per_sample,
                              run / "checkpoints" / "last") if state.step > first_step
              else f"nothing to do: {run} is trained to step {state.step} (of {until})")


@contextlib.contextmanager
def one_line_errors(argv: list[str], run: Path) -> Iterator[None]:
    """Around a training command's work in ``run``: bad input (a ``ValueError``: an option, the data, a
    checkpoint) ends it with a one-line error, and so does a loss that is not finite (``FloatingPointError``,
    code 3); under torchrun, its restarts remember the line (train/restarts.py)."""
    with failures_remembered(argv):
        try:
            yield
        except FloatingPointError as error:
            fail(f"{error}. The last good checkpoint is kept in {run / 'checkpoints'}", code=3)
        except ValueError as error:  # a DataError from a loader's worker carries the worker's traceback
            fail(data_error_line(error) if isinstance(error, DataError) else str(error))


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    config = parse_config(TrainConfig, __doc__, argv)
    try:
        # the lock outside: a refusal is no failure of these inputs for torchrun's restarts to remember
        with output_lock(config.out, "train/bc.py"):
            with one_line_errors(sys.argv[1:] if argv is None else argv, Path(config.out)):
                run_training(config)
    except KeyboardInterrupt:  # Ctrl-C reaches every rank; rank 0 says where the run stands
        if int(os.environ.get("RANK", "0")) == 0:
            last = latest_checkpoint(Path(config.out))
            print(f"\ninterrupted: {last or 'no checkpoint yet'} is kept; rerun the same command to resume",
                  file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
