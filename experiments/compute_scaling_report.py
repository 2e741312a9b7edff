"""From experiments.compute_scaling's measurements to its results: the fitted transports, each policy's
costs, the checks against every measured point, the predictions for 1 to ``--max-ranks`` ranks, the
recorded GPU figures (experiments/compute_scaling_gpu.py) and the scaling chart; ``section_text`` renders the
``scaling_compute`` section of the docs from the results.

``report`` does it all but the section; ``fit_transports``, ``policy_cost`` and ``predictions`` are its parts.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from pathlib import Path

from core.errors import fail
from core.files import repo_relative
from experiments.common import doc_link, milliseconds
from experiments.compute_scaling_gpu import NO_NCCL_FIT, gpu_figures, gpu_text
from experiments.step_model import (HOOK_TRANSPORT, TRANSPORT_ALGORITHMS, TRANSPORTS, PolicyCost, Setting, Transport,
                                    fit_transport, int8_payload_bytes, one_rank_rate, powersgd_bytes, predict,
                                    scaling_limit, straggler_s)
from train.comm.shm_all_reduce import MAX_SLOT_BYTES

CHECK_TOLERANCE = 0.10  # the goal: every prediction within 10% of its measured point
LIMITATIONS = [
    "The transports were timed between 2 ranks on one host (loopback TCP, shared memory): f(R) and g(R) come "
    "from each algorithm, not from measurements at more ranks, and across real hosts alpha and beta are the "
    "network's. Rerun the sweep there before trusting the ring curves past one host.",
    "Each rank has its own core. How ranks slow each other on a shared host is measured on this machine's "
    "cores (two processes at once); a host with more cores shares its caches and memory among more ranks.",
    "The straggler wait takes the ranks' step times as independent draws from this machine's single steps: "
    "another machine, or ranks that slow down together, spread differently.",
    "Not modelled: DDP's own fixed cost per step (the 1-rank DDP checks measure it: within this VM's noise on "
    "CPU; on the GPU not yet told apart from how single runs of a launch-bound step spread) and any overlap of "
    "communication with the backward pass.",
    "The fits are linear in bytes between the sizes swept (column sizes). Calls far larger leave the caches "
    "and cost more per byte: sweep larger sizes (--sweep-floats) before predicting for buckets above them.",
    "shm needs every rank on one host: its curves are for a host with R cores.",
    "With --grad-accum the optimiser step is counted once per micro-step (an upper bound on compute).",
]


def fit_transports(points: dict[str, list]) -> tuple[dict[str, Transport], dict]:
    """Each measured transport's cold and warm fit from its points [ranks, bytes, mean s, median s, warm mean s,
    warm median s], and a summary for the JSON."""
    transports, fits = {}, {}
    for name, measured in points.items():
        algorithm, carries = TRANSPORTS[name]
        slot = MAX_SLOT_BYTES if name == "shm" else None
        cold, error = fit_transport(algorithm, [(r, n, mean) for r, n, mean, *_ in measured], slot)
        warm, warm_error = fit_transport(algorithm, [(r, n, warm_mean) for r, n, _, _, warm_mean, _ in measured], slot)
        transports[name] = dataclasses.replace(cold, warm=warm)
        fits[name] = {"carries": carries, "algorithm": algorithm, "f_g": TRANSPORT_ALGORITHMS[algorithm][0],
                      "alpha_s": cold.alpha_s, "beta_s_per_byte": cold.beta_s_per_byte, "rms_relative_error": error,
                      "warm_alpha_s": warm.alpha_s, "warm_beta_s_per_byte": warm.beta_s_per_byte,
                      "warm_rms_relative_error": warm_error, "sizes_bytes": [n for _, n, *_ in measured]}
    return transports, fits


def per_step(run: dict) -> dict[str, float]:
    """A run's data wait, compute and communication per optimiser step (one rank's), and their sum."""
    figures = {key: run[f"{key}_s"] / run["steps"] for key in ("data_wait", "compute", "communication")}
    return {**figures, "step": sum(figures.values())}


def policy_cost(measured: dict, bucket_cap_mb: float, powersgd_rank: int) -> PolicyCost:
    """The costs the model takes from one policy's calibration runs (experiments.compute_scaling.runs)."""
    plain, shared = per_step(measured["runs"]["1 process"]), per_step(measured["runs"]["2 processes"])

    def added_by(run: str) -> float:  # the hook's work inside the backward pass counts too, not only what it exposes
        return per_step(measured["runs"][run])["step"] - plain["step"]

    return PolicyCost(batch=measured["batch"], data_s=plain["data_wait"], compute_s=plain["compute"],
                      shapes=tuple(map(tuple, measured["shapes"])), shared_data_s=shared["data_wait"],
                      shared_compute_s=shared["compute"],
                      step_times_s=tuple(measured["runs"]["2 processes"]["step_times_s"]),
                      bucket_cap_bytes=int(bucket_cap_mb * 2 ** 20),
                      int8_codec_s=added_by("1 rank, int8"),
                      powersgd_codec_s=added_by("1 rank, powersgd"),
                      powersgd_rank=powersgd_rank)


def curve_settings(grad_accum: int, powersgd_rank: int) -> dict[str, Setting]:
    return {"shm (one host)": Setting("shm"), f"shm, grad-accum {grad_accum}": Setting("shm", grad_accum),
            "ring": Setting("ring"), f"ring, grad-accum {grad_accum}": Setting("ring", grad_accum),
            "gloo": Setting("none"), "int8": Setting("int8"), f"powersgd (rank {powersgd_rank})": Setting("powersgd")}


def checks(policies: dict, costs: dict[str, PolicyCost], transports: dict[str, Transport]) -> list[dict]:
    """Every measured DDP run, and the process alone, beside the model's prediction for its setup."""
    rows = []
    for policy, cost in costs.items():
        for name, run in policies[policy]["runs"].items():
            if run["launch"] == "pair":  # two trainings, not one: nothing of the model's to compare
                continue
            setting = Setting(run["hook"] if run["launch"] != "plain" else "shm", run["grad_accum"])
            predicted = predict(cost, setting, run["ranks"], transports)
            rounds = run.get("rounds_samples_per_s") or [run["samples_per_s"]]
            rows.append({"policy": policy, "point": name, "role": run["role"], "ranks": run["ranks"],
                         "launch": run["launch"], "hook": setting.hook, "grad_accum": setting.grad_accum,
                         "measured_samples_per_s": run["samples_per_s"],
                         "rounds_spread": max(rounds) / min(rounds) - 1,
                         "within_rounds": min(rounds) <= predicted["samples_per_s"] <= max(rounds),
                         "predicted_samples_per_s": predicted["samples_per_s"],
                         "error": predicted["samples_per_s"] / run["samples_per_s"] - 1,
                         "measured_sync_efficiency": run["sync_efficiency"],
                         "predicted_sync_efficiency": predicted["sync_efficiency"],
                         "measured_communication_s": per_step(run)["communication"],
                         "predicted_communication_s": predicted["communication_s"],
                         "predicted_wait_s": predicted["wait_s"], "predicted_transfer_s": predicted["transfer_s"]})
    return rows


def predictions(costs: dict[str, PolicyCost], settings: dict[str, Setting], transports: dict[str, Transport],
                max_ranks: int) -> dict:
    """Per policy and setting: samples/s, speedup and sync efficiency at 1, 2, 4, ... ranks, and where it stops."""
    grid = sorted({2 ** i for i in range(max_ranks.bit_length()) if 2 ** i <= max_ranks} | {max_ranks})
    result = {}
    for policy, cost in costs.items():
        result[policy] = {}
        for name, setting in settings.items():
            points = {r: predict(cost, setting, r, transports) for r in grid}
            for figures in points.values():
                figures["speedup"] = figures["samples_per_s"] / one_rank_rate(cost)
            result[policy][name] = {"hook": setting.hook, "grad_accum": setting.grad_accum, "ranks": grid,
                                    **{key: [points[r][key] for r in grid] for key in
                                       ("samples_per_s", "speedup", "sync_efficiency", "wait_s", "transfer_s")},
                                    "stops_at": scaling_limit(points)}
    return result


def plot(path: Path, costs: dict[str, PolicyCost], settings: dict[str, Setting], transports: dict[str, Transport],
         measured: dict, max_ranks: int) -> None:
    """Speedup over one process against ranks (log2 axes), the ideal line, a curve per setting and the
    measured points (speedup over the measured process), one panel per policy."""
    from matplotlib.figure import Figure  # here: matplotlib takes a second to import
    from matplotlib.lines import Line2D

    figure = Figure(figsize=(4.6 * len(costs), 5.2), layout="constrained")
    colours = dict(zip(settings, [f"C{index}" for index in range(len(settings))]))
    ranks = list(range(1, max_ranks + 1))
    for axes, (policy, cost) in zip(figure.subplots(1, len(costs), squeeze=False)[0], costs.items()):
        axes.plot(ranks, ranks, "k--", linewidth=1)
        for name, setting in settings.items():
            axes.plot(ranks, [predict(cost, setting, r, transports)["samples_per_s"] / one_rank_rate(cost)
                              for r in ranks], color=colours[name], linewidth=1.5)
        runs = measured[policy]["runs"]
        for run in runs.values():
            name = next((n for n, s in settings.items() if run["role"] == "check" and s == Setting(run["hook"],
                         run["grad_accum"]) and (run["hook"] != "shm" or run["launch"] != "loopback")), None)
            if name:
                axes.plot(run["ranks"], run["samples_per_s"] / runs["1 process"]["samples_per_s"],
                          "s" if run["launch"] == "loopback" else "o", color=colours[name], markeredgecolor="black")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log", base=2)
        ticks = [2 ** i for i in range(max_ranks.bit_length()) if 2 ** i <= max_ranks]
        axes.set_xticks(ticks, [str(t) for t in ticks])
        axes.set_yticks(ticks, [str(t) for t in ticks])
        axes.set_title(f"{policy} (batch {cost.batch} per rank)")
        axes.set_xlabel("ranks")
        axes.set_ylabel("speedup over one process")
        axes.grid(alpha=0.3, which="both")
    handles = [Line2D([], [], color="black", linestyle="--", label="ideal"),
               *(Line2D([], [], color=colour, label=name) for name, colour in colours.items()),
               Line2D([], [], marker="o", color="grey", markeredgecolor="black", linestyle="none",
                      label="measured, one host"),
               Line2D([], [], marker="s", color="grey", markeredgecolor="black", linestyle="none",
                      label="measured, 2 agents on loopback")]
    figure.legend(handles=handles, loc="outside lower center", ncol=min(5, 2 * len(costs)))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".png.tmp")
    figure.savefig(temporary, format="png", dpi=100)
    os.replace(temporary, path)


def stop_text(limit: dict | None, max_ranks: int) -> str:
    return f"{limit['ranks']} ranks ({limit['reason']})" if limit else f"not by {max_ranks} ranks"


def where_it_stops(predicted: dict, max_ranks: int) -> list[str]:
    """One sentence per policy: where the ring (bc.py's default across hosts) stops, and which settings move
    that point out or in."""
    sentences = []
    for policy, curves in predicted.items():
        def reach(name: str) -> int:
            limit = curves[name]["stops_at"]
            return limit["ranks"] if limit else 2 * max_ranks

        def listed(names: list[str]) -> str:
            return "; ".join(f"{name}: {stop_text(curves[name]['stops_at'], max_ranks)}"
                             for name in sorted(names, key=reach, reverse=True))
        later = [name for name in curves if reach(name) > reach("ring")]
        earlier = [name for name in curves if reach(name) < reach("ring")]
        sentences.append(f"{policy}, ring: {stop_text(curves['ring']['stops_at'], max_ranks)}."
                         + (f" Later: {listed(later)}." if later else "")
                         + (f" Earlier: {listed(earlier)}." if earlier else ""))
    return sentences


def policy_summary(cost: PolicyCost, max_ranks: int) -> dict:
    """What the JSON and the docs say of one policy's costs."""
    return {"batch": cost.batch, "data_s": cost.data_s, "compute_s": cost.compute_s,
            "shared_data_s": cost.shared_data_s, "shared_compute_s": cost.shared_compute_s,
            "straggler_s": {str(ranks): straggler_s(cost.step_times_s, ranks) for ranks in (2, max_ranks)},
            "gradient_bytes": cost.gradient_bytes, "buckets": len(cost.buckets()),
            "largest_bucket_bytes": max(cost.bucket_bytes()),
            "int8_codec_s": cost.int8_codec_s,
            "int8_payload_bytes": sum(map(int8_payload_bytes, cost.bucket_bytes())),
            "powersgd_codec_s": cost.powersgd_codec_s,
            "powersgd_bytes": sum(sum(powersgd_bytes(bucket, cost.powersgd_rank)) for bucket in cost.buckets())}


def transport_table(fits: dict) -> list[str]:
    lines = ["Each transport cold (after --sweep-gap-ms of computing) / warm (at once after another call):", "",
             "| transport | carries | algorithm | alpha (us) | beta (ns/byte) | bandwidth | sizes | fit rms error |",
             "|---|---|---|---|---|---|---|---|"]

    def bandwidth(beta: float) -> str:
        return f"{1e-9 / beta:.2f}" if beta > 0 else "-"

    for name, fit in fits.items():
        sizes = fit["sizes_bytes"]
        lines.append(f"| {name} | {fit['carries']} | {fit['algorithm']}, {fit['f_g']} | "
                     f"{fit['alpha_s'] * 1e6:.1f} / {fit['warm_alpha_s'] * 1e6:.1f} | "
                     f"{fit['beta_s_per_byte'] * 1e9:.3f} / {fit['warm_beta_s_per_byte'] * 1e9:.3f} | "
                     f"{bandwidth(fit['beta_s_per_byte'])} / {bandwidth(fit['warm_beta_s_per_byte'])} GB/s | "
                     f"{len(sizes)}: {min(sizes):,} B to {max(sizes) / 1e6:.1f} MB | "
                     f"{fit['rms_relative_error']:.0%} / {fit['warm_rms_relative_error']:.0%} |")
    return lines + [f"| nccl | GPUs | ring | - | - | - | 0 | not fitted: {NO_NCCL_FIT} |"]


def beyond_the_sweep(fits: dict, policies: dict) -> list[str]:
    """A warning for each policy and transport whose call for the policy's largest bucket is larger than any
    the transport was timed at."""
    warnings = []
    for policy, cost in policies.items():
        largest = cost["largest_bucket_bytes"]
        for name, fit in fits.items():
            sent = int8_payload_bytes(largest) if name == HOOK_TRANSPORT["int8"] else largest
            if sent > max(fit["sizes_bytes"]):
                warnings.append(f"**{policy}'s largest bucket sends {sent / 1e6:.1f} MB by {name}, more than it was "
                                f"timed at ({max(fit['sizes_bytes']) / 1e6:.1f} MB): those transfers are "
                                "extrapolated.**")
    return warnings


def policy_table(policies: dict, max_ranks: int) -> list[str]:
    lines = ["Per micro-step, alone on the host / with every core training; straggler wait per step at 2 / "
             f"{max_ranks} ranks:", "",
             "| policy | batch per rank | gradients | DDP buckets | data wait | compute | straggler wait | int8 codec "
             "| PowerSGD codec | PowerSGD sends |", "|---" * 10 + "|"]
    for policy, cost in policies.items():
        lines.append(f"| {policy} | {cost['batch']} | {cost['gradient_bytes'] / 1e6:.2f} MB | "
                     f"{cost['buckets']}, largest {cost['largest_bucket_bytes'] / 1e6:.2f} MB | "
                     f"{milliseconds(cost['data_s'], cost['shared_data_s'])} | "
                     f"{milliseconds(cost['compute_s'], cost['shared_compute_s'])} | "
                     f"{milliseconds(*cost['straggler_s'].values())} | {milliseconds(cost['int8_codec_s'])} | "
                     f"{milliseconds(cost['powersgd_codec_s'])} | "
                     f"{cost['powersgd_bytes'] / 1e6:.3f} MB |")
    return lines


def check_table(rows: list[dict]) -> list[str]:
    checked = [row for row in rows if row["role"] == "check"]
    within = sum(abs(row["error"]) <= CHECK_TOLERANCE for row in checked)
    misses = [row for row in checked if abs(row["error"]) > CHECK_TOLERANCE]
    spread = statistics.median(row["rounds_spread"] for row in checked) if checked else 0.0
    lines = [f"Checks: {within} of {len(checked)} measured points within {CHECK_TOLERANCE:.0%} of the model "
             "(calibration rows are runs the model was fitted to); the measured figure is the best round, and "
             f"the rounds of one point differ by {spread:.0%} (median; column \"rounds' spread\"), so this VM's "
             "noise is of the tolerance's size."
             + (f" Of the {len(misses)} misses, {sum(row['within_rounds'] for row in misses)} fall between their "
                "rounds' slowest and fastest." if misses else "")
             + " Exposed communication is bc.py's (train/monitor.py): under a blocking hook it leaves out the buckets "
             "before the last, which it counts as compute.", "",
             "| policy | point | role | measured samples/s | rounds' spread | predicted | error | "
             "sync eff measured / predicted | exposed communication per step: measured / predicted (wait + transfer) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['policy']} | {row['point']} | {row['role']} | {row['measured_samples_per_s']:.0f} | "
                     f"{row['rounds_spread']:.0%} | {row['predicted_samples_per_s']:.0f} | {row['error']:+.1%} | "
                     f"{row['measured_sync_efficiency']:.2f} / {row['predicted_sync_efficiency']:.2f} | "
                     f"{milliseconds(row['measured_communication_s'], row['predicted_communication_s'])} "
                     f"({milliseconds(row['predicted_wait_s'])} + {milliseconds(row['predicted_transfer_s'])}) |")
    return lines


def prediction_table(predicted: dict, max_ranks: int) -> list[str]:
    ranks = next(iter(next(iter(predicted.values())).values()))["ranks"]
    lines = ["Predicted speedup over one process / sync efficiency; a curve stops scaling where sync efficiency "
             "falls under 0.5 or a doubling gains under 10%.", "",
             "| policy | setting | " + " | ".join(f"R = {r}" for r in ranks) + " | stops at |",
             "|---|---|" + "---|" * len(ranks) + "---|"]
    for policy, curves in predicted.items():
        for name, curve in curves.items():
            cells = " | ".join(f"{s:.1f}x / {e:.2f}" for s, e in zip(curve["speedup"], curve["sync_efficiency"]))
            lines.append(f"| {policy} | {name} | {cells} | {stop_text(curve['stops_at'], max_ranks)} |")
    return lines


def section_text(results: dict) -> str:
    """The ``scaling_compute`` section of the docs from compute_scaling.json's content."""
    config, measurements, command = results["config"], results["measurements"], results["command"]
    machine, max_ranks = measurements["machine"], config["max_ranks"]
    plot_link = doc_link(config["plot"], config["docs"])
    retimed = measurements.get("transports_machine")
    commands = [measurements["command"]]
    if retimed:
        commands.append(f"{measurements['transports_command']}   # times the transports again, refits the rest")
    if command not in (measurements["command"], measurements.get("transports_command")):
        commands.append(f"{command}   # refits the recorded measurements")
    lines = [f"Measured {machine['date']} on {machine['cores']} cores ({machine['device']}), code "
             f"{machine['code_version']}, on `{measurements['data']}`; one thread per rank."
             + (f" Transports timed again {retimed['date']}, code {retimed['code_version']}." if retimed else ""),
             "", "```bash", *commands, "```", "", f"![speedup against ranks per policy and setting]({plot_link})", "",
             "The model (`experiments/step_model.py`): step = k x (data + compute) + wait(R) + transfer(R); "
             "samples/s = R x k x batch / step; sync efficiency = k x compute / (k x compute + wait + transfer). "
             "Data wait and compute come from processes without DDP: one alone for one rank, two at once (every "
             "core busy) from two ranks on. wait(R) is the straggler wait, E[slowest of R steps] - E[one step] over "
             "the single steps of those two processes (x sqrt(k)); transfer(R) the hook's all-reduce with the "
             "transports below, once a step, not overlapped with the backward pass.", "",
             *transport_table(results["fits"]), "", *policy_table(results["policies"], max_ranks), "",
             *(f"{warning}\n" for warning in beyond_the_sweep(results["fits"], results["policies"])),
             *check_table(results["checks"]), "", *prediction_table(results["predictions"], max_ranks), "",
             *(f"- {sentence}" for sentence in results["where_it_stops"])]
    if results["gpu"]:
        lines += ["", *gpu_text(results["gpu"], repo_relative(config["gpu_results"]))]
    return "\n".join(lines + ["", "Limitations:", ""] + [f"- {text}" for text in LIMITATIONS])


def report(config, measurements: dict) -> dict:
    """Fit, check and predict from ``measurements`` and draw ``config.plot``; the results' part of
    compute_scaling.json."""
    transports, fits = fit_transports(measurements["transports"])
    missing = {HOOK_TRANSPORT[hook] for hook in ("shm", "ring", "none", "int8")} - set(transports)
    if missing:
        fail(f"the measurements hold no timings of the {', '.join(sorted(missing))} transport")
    costs = {policy: policy_cost(measurements["policies"][policy], config.bucket_cap_mb, config.powersgd_rank)
             for policy in config.policies}
    settings = curve_settings(config.grad_accum, config.powersgd_rank)
    predicted = predictions(costs, settings, transports, config.max_ranks)
    results = {"fits": fits, "policies": {policy: policy_summary(cost, config.max_ranks)
                                          for policy, cost in costs.items()},
               "checks": checks(measurements["policies"], costs, transports), "predictions": predicted,
               "where_it_stops": where_it_stops(predicted, config.max_ranks),
               "gpu": gpu_figures(Path(config.gpu_results), costs), "plot": config.plot}
    plot(Path(config.plot), costs, settings, transports, measurements["policies"], config.max_ranks)
    return results
