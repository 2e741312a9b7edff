"""Watching a training run: where each step's time goes, and rank 0's records of it.

``StepTimer`` (every rank) splits training time into data wait, compute and
communication. ``Monitor`` (rank 0) writes what the loop reports: a progress line,
``RUN/metrics.jsonl``, TensorBoard events in ``RUN/tensorboard``, optionally a Weights &
Biases run, and ``RUN/training_curve.png`` at the end.

How communication is timed (docs/distributed.md has the long version). DDP all-reduces
gradient buckets while the backward pass is still computing, so the time a bucket spends
on the wire is mostly hidden and would overstate the cost. What the step pays for is
the *exposed* communication: from the moment the last gradient is computed (a
post-accumulate-grad hook on every parameter marks it) to the moment ``backward()``
returns, which DDP delays until every bucket is averaged. That span also holds the wait
for a slower rank, which is a synchronisation cost too. Everything else in the forward,
backward and optimiser step is compute, and

    sync efficiency = compute / (compute + communication)

On a GPU the marks are CUDA events on the compute stream, so they time the GPU's work,
not the CPU's kernel launches; a step's data wait is then the time the GPU idled for
the next batch.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch
from torch.utils.tensorboard import SummaryWriter

SYNC_EFFICIENCY_WARNING = 0.7


class StepTimer:
    """Seconds of data wait, compute and exposed communication, summed over a window of steps.

    The loop calls ``fetch_start``, ``fetch_done`` and ``backward_done`` in every micro-step
    and ``step_done`` after the optimiser step; ``window()`` returns the sums since the
    last call and starts a new window. Time outside those calls (validation, checkpoints,
    logging) is not counted.
    """

    def __init__(self, module: torch.nn.Module, device: torch.device):
        self.cuda = device.type == "cuda"
        for parameter in module.parameters():
            if parameter.requires_grad:
                parameter.register_post_accumulate_grad_hook(self._gradient_ready)
        self._spans: list[tuple[str, object, object]] = []  # (kind, start mark, end mark)
        self._mark = self._gradients_ready = None
        self._samples = 0

    def _now(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _seconds(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start

    def _gradient_ready(self, _parameter: torch.Tensor) -> None:
        self._gradients_ready = self._now()  # the last call of a backward pass marks its end

    def _span(self, kind: str, end=None) -> None:
        end = self._now() if end is None else end
        self._spans.append((kind, self._mark, end))
        self._mark = end

    def fetch_start(self) -> None:
        self._mark = self._now()

    def fetch_done(self) -> None:
        self._span("data")

    def backward_done(self, synced: bool) -> None:
        """After ``backward()``; ``synced``: DDP all-reduced the gradients in this backward."""
        if synced:
            self._span("compute", self._gradients_ready)
            self._span("communication")
        else:
            self._span("compute")

    def step_done(self, samples: int) -> None:
        self._span("compute")
        self._samples += samples

    def window(self) -> dict[str, float]:
        """``data_wait_s``, ``compute_s``, ``communication_s`` and ``samples`` since the last window."""
        if self.cuda:
            torch.cuda.synchronize()
        totals = {"data": 0.0, "compute": 0.0, "communication": 0.0}
        for kind, start, end in self._spans:
            totals[kind] += self._seconds(start, end)
        result = {"data_wait_s": totals["data"], "compute_s": totals["compute"],
                  "communication_s": totals["communication"], "samples": float(self._samples)}
        self._spans, self._samples = [], 0
        return result


def sync_efficiency(compute_s: float, communication_s: float) -> float:
    """compute / (compute + communication): 1.0 when no time goes to communication."""
    total = compute_s + communication_s
    return compute_s / total if total > 0 else 1.0


def read_records(path: Path) -> list[dict]:
    """The records of a metrics.jsonl; a last line cut short by a crash is skipped."""
    records = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def keep_records(path: Path, keep) -> None:
    """Rewrite a metrics.jsonl (atomically) with only the records for which ``keep(record)`` is true.

    A resumed run uses it to drop the records written after its checkpoint: those steps or
    rounds are trained again, so the file describes the history that led to each checkpoint.
    """
    kept = [json.dumps(record) + "\n" for record in read_records(path) if keep(record)]
    temporary = path.with_suffix(".jsonl.tmp")
    temporary.write_text("".join(kept))
    os.replace(temporary, path)


def progress_line(record: dict) -> str:
    return " ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items())


class Monitor:
    """Rank 0's records of a run (see the module docstring).

    A run that resumes from step ``start_step`` first drops the records after it from
    metrics.jsonl (and TensorBoard purges its events after it), because those steps are
    trained again: the records then describe the history that led to each checkpoint.
    """

    def __init__(self, run: Path, config, start_step: int, oversubscription: Callable[[], str] = lambda: ""):
        self.run = Path(run)
        self.oversubscription = oversubscription  # a phrase naming thread oversubscription on the host, or ''
        self.metrics_path = self.run / "metrics.jsonl"
        keep_records(self.metrics_path, lambda record: record.get("step", 0) <= start_step)
        self.metrics = open(self.metrics_path, "a")
        self.tensorboard = SummaryWriter(str(self.run / "tensorboard"), purge_step=start_step + 1)
        self.wandb = None
        if config.log.wandb:
            import wandb  # only when asked: it is slow to import

            self.wandb = wandb.init(project=config.log.wandb_project, dir=str(self.run), name=self.run.name,
                                    config=asdict(config), mode=config.log.wandb_mode or None)

    def log(self, record: dict) -> None:
        """Append ``record`` (it has a ``step``) everywhere, print it, warn on a low sync efficiency."""
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()
        scalars = {key: value for key, value in record.items()
                   if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)}
        for key, value in scalars.items():
            self.tensorboard.add_scalar(key, value, record["step"])
        if self.wandb is not None:
            self.wandb.log(scalars, step=record["step"])
        print(progress_line(record), flush=True)
        efficiency = record.get("sync_efficiency")
        if efficiency is not None and efficiency < SYNC_EFFICIENCY_WARNING:
            crowded = self.oversubscription()
            remedy = (f"{crowded}: give each rank fewer --threads or run fewer jobs at once" if crowded
                      else "try --grad-accum, a larger --batch-size or --comm-hook")
            print(f"warning: sync efficiency {efficiency:.2f} is below {SYNC_EFFICIENCY_WARNING}: ranks spend "
                  f"{1 - efficiency:.0%} of their step communicating; {remedy}", file=sys.stderr, flush=True)

    def summary(self, first_step: int, step: int, seconds: float, batch: int, images_per_sample: int,
                checkpoint: Path) -> str:
        """The run's last line: the steps trained from ``first_step`` to ``step`` and their wall time,
        samples/s of ``batch`` windows a step (images/s for a policy that sees images) over it, the
        best and the last validation loss in metrics.jsonl (steps before a resume included) and the
        checkpoint."""
        rate = (step - first_step) * batch / seconds if seconds > 0 else 0.0
        resumed = f" (from step {first_step} to {step})" if first_step else ""
        images = f", {rate * images_per_sample:,.0f} images/s" if images_per_sample else ""
        losses = [(record["val_loss"], record["step"]) for record in read_records(self.metrics_path)
                  if "val_loss" in record]
        validation = "no validation loss (no episodes held out)"
        if losses:
            (best, at), last = min(losses), losses[-1][0]
            validation = f"validation loss best {best:.4g} (step {at}), last {last:.4g}"
        return (f"done: {step - first_step} steps{resumed} in {seconds:.2f} s ({rate:,.0f} samples/s{images}); "
                f"{validation}; checkpoint {checkpoint}")

    def close(self) -> None:
        """Flush and close everything, and draw RUN/training_curve.png from metrics.jsonl."""
        self.metrics.close()
        self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()
        plot_training_curve(self.metrics_path, self.run / "training_curve.png")


def plot_training_curve(metrics_path: Path, png_path: Path) -> None:
    """Loss and validation loss (log scale) over steps, and the learning rate below them, as a PNG."""
    from matplotlib.figure import Figure  # here: matplotlib takes a second to import, and only the end plots

    records = read_records(metrics_path)
    figure = Figure(figsize=(7, 5), layout="constrained")
    loss_axes, lr_axes = figure.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    for key, label, style in (("loss", "training loss", "-"), ("val_loss", "validation loss", "o-")):
        points = [(r["step"], r[key]) for r in records if key in r]
        if points:
            loss_axes.plot(*zip(*points), style, label=label, markersize=3)
    loss_axes.set_yscale("log")
    loss_axes.set_ylabel("loss")
    loss_axes.legend()
    loss_axes.grid(alpha=0.3)
    points = [(r["step"], r["lr"]) for r in records if "lr" in r]
    if points:
        lr_axes.plot(*zip(*points), color="tab:green")
    lr_axes.set_ylabel("learning rate")
    lr_axes.set_xlabel("step")
    lr_axes.grid(alpha=0.3)
    temporary = png_path.with_suffix(".png.tmp")
    figure.savefig(temporary, format="png", dpi=100)
    os.replace(temporary, png_path)
