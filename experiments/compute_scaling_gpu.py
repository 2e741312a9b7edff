"""What experiments.compute_scaling can say of the GPU from benchmarks/gpu_paths.py's recorded runs.

The lent GPU machines have one GPU each, and nccl refuses two ranks on one GPU, so those runs hold no
timings across ranks to fit nccl's alpha and beta to. They give two things:

- per policy, the bandwidth a ring all-reduce would need for sync efficiency 0.5 at many ranks;
- the one-rank checks: each policy under DDP with one nccl rank (``DDP_VARIANTS``) against the same
  policy without DDP. The model gives nccl no cost at one rank, so the gap is DDP's own cost per
  step. Run with ``--rounds`` (the gpu_paths docstring gives the command), a check also shows how
  far single runs of the same variant spread.
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.common import milliseconds
from experiments.step_model import PolicyCost, break_even_bandwidth

NO_NCCL_FIT = ("gpu_paths.json has one rank per run (nccl refuses two ranks on one GPU): no timings across "
               "ranks or sizes to fit alpha and beta to")
POLICIES = ("mlp", "act", "diffusion")
DDP_VARIANTS = {"mlp": "mlp ddp comm hook none", "act": "act ddp", "diffusion": "diffusion ddp"}  # one nccl rank


def gpu_figures(path: Path, costs: dict[str, PolicyCost]) -> dict | None:
    """The recorded GPU runs per step (batch derived from samples/s), the break-even bandwidth per policy,
    and the one-rank DDP checks; None when ``path`` does not exist."""
    if not path.exists():
        return None
    recorded = json.loads(path.read_text())
    steps = recorded["job"]["steps"] - recorded["job"]["log_interval"]

    def step(figures: dict) -> dict:
        busy = figures["data_wait_s"] + figures["compute_s"] + figures["communication_s"]
        return {"batch": round(figures["samples_per_s"] * busy / steps), "samples_per_s": figures["samples_per_s"],
                **{f"{key}_s": figures[f"{key}_s"] / steps for key in ("data_wait", "compute", "communication")},
                "rounds": figures.get("round_samples_per_s", [figures["samples_per_s"]])}

    variants = {name: step(figures) for name, figures in recorded["variants"].items() if figures["ok"]}
    policies = {policy: variants[policy] for policy in POLICIES if policy in variants}
    for policy, figures in policies.items():
        if policy in costs:
            figures["break_even_bytes_per_s"] = break_even_bandwidth(costs[policy].gradient_bytes, figures["compute_s"])
    checks = {}
    for policy, plain in policies.items():
        ddp = variants.get(DDP_VARIANTS[policy])
        if ddp is None:
            continue
        predicted = plain["batch"] / (plain["data_wait_s"] + plain["compute_s"])
        checks[policy] = {"measured_samples_per_s": ddp["samples_per_s"], "predicted_samples_per_s": predicted,
                          "error": predicted / ddp["samples_per_s"] - 1,
                          "ddp_adds_s": ddp["batch"] / ddp["samples_per_s"] - plain["batch"] / plain["samples_per_s"],
                          "data_wait_s": [plain["data_wait_s"], ddp["data_wait_s"]],
                          "rounds": {"without_ddp": plain["rounds"], "ddp": ddp["rounds"]}}
    others = {name: figures["samples_per_s"] for name, figures in recorded["variants"].items()
              if name.startswith("mlp ") and figures["ok"] and not figures["torchrun"]}
    return {"device": recorded["machine"]["device"], "date": recorded["machine"]["date"], "nccl_fit": None,
            "why_no_fit": NO_NCCL_FIT, "policies": policies, "checks": checks, "other_mlp_without_ddp": others,
            "one_rank_hooks": {name.removeprefix("mlp ddp comm hook "): figures for name, figures in variants.items()
                               if name.startswith("mlp ddp comm hook ")}}


def spread(rates: list[float]) -> str:
    return f"{min(rates):.0f}-{max(rates):.0f}" if len(rates) > 1 else f"{rates[0]:.0f}"


def gpu_text(gpu: dict, source: str) -> list[str]:
    """The GPU paragraph of the ``scaling_compute`` section: break-even bandwidths and the one-rank checks."""
    lines = [f"On the GPU ({gpu['device']}, `{source}`, {gpu['date']}) nccl is not fitted: {gpu['why_no_fit']}. "
             "What the figures give is the bandwidth a ring all-reduce needs, latency aside, for sync efficiency "
             "0.5 at many ranks (2 x gradient bytes / compute per step):", "",
             "| policy | batch | compute per step | break-even bandwidth |", "|---|---|---|---|"]
    for policy, figures in gpu["policies"].items():
        needed = figures.get("break_even_bytes_per_s")
        lines.append(f"| {policy} | {figures['batch']} | {milliseconds(figures['compute_s'])} | "
                     + (f"{needed / 1e9:.2f} GB/s |" if needed else "- |"))
    if not gpu["checks"]:
        return lines
    lines += ["", "One nccl rank under DDP against the same policy without it; the model gives nccl no cost at one "
              "rank, so the gap is DDP's own cost per step (samples/s: the fastest round, the rounds' range):", "",
              "| policy | without DDP | DDP, 1 nccl rank | predicted | error | DDP adds per step | data wait per step "
              "(without / with DDP) |", "|---|---|---|---|---|---|---|"]
    for policy, check in gpu["checks"].items():
        lines.append(f"| {policy} | {spread(check['rounds']['without_ddp'])} | {spread(check['rounds']['ddp'])} | "
                     f"{check['predicted_samples_per_s']:.0f} | {check['error']:+.0%} | "
                     f"{milliseconds(check['ddp_adds_s'])} | {milliseconds(*check['data_wait_s'])} |")
    single = all(len(rates) == 1 for check in gpu["checks"].values() for rates in check["rounds"].values())
    others = gpu["other_mlp_without_ddp"]
    if single and len(others) > 1 and "mlp" in gpu["checks"]:
        without, with_ddp = gpu["checks"]["mlp"]["data_wait_s"]
        lines += ["", f"Each variant ran once. The same file's mlp runs without DDP ({', '.join(others)}) train at "
                  f"{min(others.values()):.0f} to {max(others.values()):.0f} samples/s: a few more kernels a step "
                  "cost as much as DDP does. The mlp's data wait, the same work on the host with or without DDP, is "
                  f"{with_ddp / without - 1:+.0%} in its DDP run. One run per variant cannot tell DDP's fixed cost "
                  "from the spread of a launch-bound step; `--rounds` in benchmarks/gpu_paths.py measures that spread."]
    return lines
