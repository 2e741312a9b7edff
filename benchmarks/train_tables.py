"""The rows benchmarks/train_speed.py adds to benchmarks/README.md for its threads and act cases, and the
cells on the limit (FLOPs, MFU, bc.py against the bare loop) every CPU row ends with."""

from __future__ import annotations


def threads_table(machine: dict, job: str, options: str, steps: int, scaling: dict) -> tuple[list[str], list[list]]:
    """The header and row of the threads case's table."""
    best, ratios = scaling["best"], scaling["ratios"]
    header = ["date", "code", "device", "job", "bc.py options", "steps", "1 run x1 samples/s",
              "2 runs, slowest samples/s", "each of 2 runs / 1 alone", "2 ranks standalone samples/s",
              "2 agents samples/s", "2 agents / standalone"]
    return header, [[machine["date"], machine["code_version"], "cpu (gloo)", job, options, steps,
                     round(best["1r1t"]["samples_per_s"]), round(best["2p_auto"]["slowest_run_samples_per_s"]),
                     f"{ratios['each_of_two_runs_vs_one_alone']:.2f}", round(best["2r_auto"]["samples_per_s"]),
                     round(best["2a_auto"]["samples_per_s"]), f"{ratios['two_agents_vs_standalone']:.2f}"]]


LIMIT_HEADER = ["MFLOP/sample", "conv share", "MFU 1 rank x1", "MFU 1 rank x2", "MFU 2 ranks", "1 rank x1 / bare",
                "1 rank x2 / bare"]


def limit_cells(scaling: dict) -> list[str]:
    """The cells of ``LIMIT_HEADER``: FLOPs per sample, MFU of 1r1t, 1r2t and 2r1t, bc.py / the bare loop."""
    flops, use, ratios = scaling.get("flops_per_sample"), scaling.get("utilisation", {}), scaling["ratios"]
    return [f"{flops['total'] / 1e6:.4g}" if flops else "–", f"{flops['convolution_share']:.1%}" if flops else "–",
            *(f"{use[name]['mfu']:.1%}" if name in use else "–" for name in ("1r1t", "1r2t", "2r1t")),
            *(f"{ratios[name]:.2f}" if name in ratios else "–" for name in ("bc_vs_bare_1r1t", "bc_vs_bare_1r2t"))]


def bare_table(machine: dict, job: str, options: str, steps: int, scaling: dict) -> tuple[list[str], list[list]]:
    """The header and row of the act case's table: one rank against the bare loop, and the utilisation."""
    best = scaling["best"]
    header = ["date", "code", "device", "job", "bc.py options", "steps", "1 rank x1 samples/s", "bare x1 samples/s",
              "1 rank x2 samples/s", "bare x2 samples/s", *LIMIT_HEADER]
    return header, [[machine["date"], machine["code_version"], "cpu", job, options, steps,
                     *(f"{best[name]['samples_per_s']:.1f}" for name in ("1r1t", "bare_1r1t", "1r2t", "bare_1r2t")),
                     *limit_cells(scaling)]]
