"""The README's and docs/performance.md's speed figures, each a function of the content of the benchmark results file
that measured it.

``python -m experiments.render`` writes them into README.md's status table and docs/performance.md
(``experiments.render.SECTIONS``) and ``--check`` fails when one differs from its file. A results file holds its
benchmark's latest run, so a figure is that run's; earlier runs are the rows of benchmarks/README.md's tables.
"""

from __future__ import annotations


def _date(result: dict) -> str:
    return result["machine"]["date"].split()[0]


def expert_text(result: dict) -> str:
    """Each task's fleet success and the lowest site's: ``reach 100%, push 100% (lowest site 100%)``."""
    tasks = result["tasks"]
    lowest = min(min(task["per_site_pc_success"].values()) for task in tasks.values())
    figures = ", ".join(f"{name} {task['pc_success']:.0f}%" for name, task in tasks.items())
    return f"{figures} (lowest site {lowest:.0f}%)"


def collect_text(result: dict) -> str:
    """1 worker over the limit, 1 → 2 workers, and (without cameras) 2 workers over ``AsyncVectorEnv``, with the
    machine's own 1 → 2 process scaling in the same run and its date."""
    ratios = result["ratios"]
    figures = [f"{ratios['collect_1w_vs_limit']:.2f}", f"{ratios['scaling_1w_to_2w']:.2f}×"]
    if not result["job"]["cameras"]:
        figures.append(f"{ratios['collect_2w_vs_vector_2env']:.2f}×")
    return (", ".join(figures) + f" ({_date(result)}; the machine's own 1 → 2 processes "
            f"{ratios['machine_scaling_1proc_to_2proc']:.2f}×)")


def loader_text(result: dict) -> str:
    """In memory over the numpy gather and streaming over ``LeRobotDataset``, with 0 workers (2 in brackets)."""
    ratios = result["ratios"]
    return (f"{ratios['memory_w0_vs_numpy_limit']:.2f} ({ratios['memory_w2_vs_numpy_limit']:.2f} with 2 workers), "
            f"{ratios['streaming_w0_vs_lerobot_w0']:.0f}× ({ratios['streaming_w2_vs_lerobot_w2']:.0f}×)")


def train_text(result: dict) -> str:
    """The mlp's weak scaling at 2 CPU ranks, and torch's DDP with gloo's all-reduce in the same rounds."""
    ratios = result["mlp_scaling"]["ratios"]
    return (f"{ratios['weak_scaling_efficiency']:.2f} ({_date(result)}; torch's DDP with gloo's all-reduce and no "
            f"hook {ratios['weak_scaling_efficiency_gloo']:.2f} in the same rounds)")


def threads_text(result: dict) -> str:
    """Each of two runs over one alone, and two torchrun agents over one 2-rank run."""
    ratios = result["threads_scaling"]["ratios"]
    return f"{ratios['each_of_two_runs_vs_one_alone']:.2f}, {ratios['two_agents_vs_standalone']:.2f}"


def image_text(result: dict) -> str:
    """The cnn's weak scaling at 2 CPU ranks and its share of a step spent waiting for data."""
    scaling = result["image_scaling"]
    return f"{scaling['ratios']['weak_scaling_efficiency']:.2f}, {scaling['data_wait_share']:.1%} ({_date(result)})"


def act_text(result: dict) -> str:
    """ACT's steps/s under train/bc.py over lerobot-train's, and the device."""
    return f"{result['ours_vs_lerobot']:.2f}× on {result['machine']['device']}"


def gpu_paths_text(result: dict) -> str:
    """How many GPU paths trained with a checkpoint that loads on CPU, and the device."""
    variants = result["variants"].values()
    return f"{sum(variant['ok'] for variant in variants)} of {len(variants)} on {result['machine']['device']}"


def deploy_text(result: dict) -> str:
    """1 worker over the lockstep loop, and 1 → 2 workers."""
    ratios = result["ratios"]
    return f"{ratios['deploy_1w_vs_limit']:.2f}, {ratios['scaling_1w_to_2w']:.2f}×"


def eval_text(result: dict) -> str:
    """2 evaluate workers over the single-process loop."""
    return f"{result['ratios']['eval_2w_vs_loop']:.2f}×"


# docs/performance.md's figures: what limits each stage, from the same results files.

def sim_text(result: dict) -> str:
    """Per task: physics alone in control steps/s, the env with its expert as a share of it, and one 96 px frame."""
    figures = [f"{task['task']} {task['physics_limit_control_steps_per_s']:,} control steps/s, env+expert "
               f"{task['env_expert_efficiency']:.2f} of it, a 96 px frame {task['render_96_fps']}/s"
               for task in result["tasks"]]
    return "; ".join(figures) + f" ({_date(result)})"


def frame_text(result: dict) -> str:
    """The range over the tasks of one 96 px frame's cost: ``6.2 to 9.0 ms (111 to 160 frames/s, 2026-11-22)``."""
    rates = [task["render_96_fps"] for task in result["tasks"]]
    return (f"{1000 / max(rates):.1f} to {1000 / min(rates):.1f} ms ({min(rates)} to {max(rates)} frames/s, "
            f"{_date(result)})")


def collect_lost_text(result: dict) -> str:
    """The bare loop's rate, and what 1 worker loses against it, split into writing, the engine and the rest."""
    lost, checksums = result["collect_1w_lost"], result["checksums"]["share_of_collect_1w_step"]
    return (f"the loop {result['steps_per_s_best']['limit']:,} steps/s; 1 worker lost {lost['lost']:.3f} of its step: "
            f"writing the stores {lost['writing']:.3f} (the checksums {checksums:.4f}), "
            f"the engine around the tasks {lost['outside_tasks']:.3f}, the rest {lost['rest']:.3f} ({_date(result)})")


# (label, setup, the peer its ratio is over: the numpy limit, LeRobot's with as many workers, or none)
LOADER_ROWS = [("numpy gather from RAM (the limit)", "numpy_limit", None),
               ("`memory`", "memory", "numpy_limit"),
               ("`streaming`, cache ≥ data", "streaming", "lerobot"),
               ("`streaming`, cache = ¼ of the data", "streaming_small_cache", "lerobot"),
               ("`LeRobotDataset` + `delta_timestamps`", "lerobot", None)]


def loader_table(result: dict) -> str:
    """Windows/s of each loader setup with 0 and 2 workers (best rounds), each with the run's ratio (medians over
    rounds) to the limit or the LeRobot peer it is judged by."""
    rates, ratios, job = result["samples_per_s_best"], result["ratios"], result["job"]

    def cell(key: str, peer: str | None, workers: int) -> str:
        rate = rates.get(f"{key}_w{workers}", rates.get(key) if workers == 0 else None)
        if rate is None or peer is None:
            return "" if rate is None else f"{rate:,}"
        if peer == "numpy_limit":
            return f"{rate:,} ({ratios[f'{key}_w{workers}_vs_numpy_limit']:.2f} of the limit)"
        return f"{rate:,} ({ratios[f'{key}_w{workers}_vs_{peer}_w{workers}']:.0f}×)"

    rows = [f"| {label} | {cell(key, peer, 0)} | {cell(key, peer, 2)} |" for label, key, peer in LOADER_ROWS]
    return "\n".join([f"{job['robots']} robots × {job['episodes']} {job['task']} episodes, {job['frames']} frames, "
                      f"batch {job['batch_size']}; windows/s, {_date(result)}:", "",
                      "| setup | 0 workers | 2 workers |", "|---|---|---|", *rows])


def loader_image_text(result: dict) -> str:
    """The in-memory loader's image windows/s with 0 workers, over a numpy gather's."""
    return (f"{result['samples_per_s_best']['memory_w0']:,} image windows/s at batch {result['job']['batch_size']}, "
            f"{result['ratios']['memory_w0_vs_numpy_limit']:.2f} of a numpy gather ({_date(result)})")


def train_detail_text(result: dict) -> str:
    """The mlp's windows/s at 1 rank and at 2 with each all-reduce, their sync efficiencies, two plain processes
    over twice one, and the share of a 2-rank step that waits for data."""
    scaling = result["mlp_scaling"]
    best, ratios = scaling["best"], scaling["ratios"]
    ours, gloo = best["2r1t"], best["2r1t_gloo"]
    return (f"one rank {best['1r1t']['samples_per_s']:,.0f} windows/s; two ranks {ours['samples_per_s']:,.0f} with "
            f"the default hook (sync efficiency {ours['sync_efficiency']:.2f}) and "
            f"{gloo['samples_per_s']:,.0f} with gloo's all-reduce ({gloo['sync_efficiency']:.2f}); "
            f"the machine's own 2 processes {ratios['machine_two_processes']:.2f} of twice one; "
            f"{scaling['data_wait_share']:.1%} of a 2-rank step waiting for data ({_date(result)})")


def gloo_text(result: dict) -> str:
    """The median time of one sum of the mlp's gradients between 2 ranks: ``shm``, the socket ring, gloo's own."""
    calls = result["milliseconds_per_call"]["normal"]["mlp gradients (100k floats)"]
    return (f"`shm` {calls['shm']['median']:.2f} ms, `ring` {calls['ring']['median']:.2f} ms, gloo's all-reduce "
            f"{calls['all_reduce']['median']:.2f} ms ({_date(result)})")


def image_detail_text(result: dict) -> str:
    """The cnn's rate at one rank, its FLOPs, one thread's utilisation of the fp32 matmul peak, the CPU's bfloat16
    units, and bc.py over its bare loop at 1 and 2 threads."""
    scaling = result["image_scaling"]
    flops, one = scaling["flops_per_sample"], scaling["utilisation"]["1r1t"]
    features, ratios = scaling["cpu_features"], scaling["ratios"]
    bf16 = "has" if features["bf16_hardware"] else "has no"
    return (f"one rank {scaling['best']['1r1t']['samples_per_s']:.0f} windows/s; {flops['total'] / 1e6:.1f} MFLOP a "
            f"sample, {flops['convolution_share']:.1%} of it convolutions; one rank on one thread "
            f"{one['gflops']:.1f} GFLOP/s, {one['mfu']:.2f} of the one-thread {one['dtype']} matmul peak; the CPU "
            f"{bf16} bfloat16 units (torch's kernels: {features['torch_capability']}); bc.py "
            f"{ratios['bc_vs_bare_1r1t']:.2f} and {ratios['bc_vs_bare_1r2t']:.2f} of its bare loop at 1 and 2 threads "
            f"({_date(result)})")


def gpu_train_text(result: dict) -> str:
    """The mlp's windows/s on one GPU."""
    scaling = result["gpu_scaling"]
    return f"{scaling['best']['1gpu']['samples_per_s']:,.0f} windows/s on {scaling['gpu']} ({_date(result)})"


def eval_detail_text(result: dict) -> str:
    """2 and 1 evaluate workers over the loop, and lockstep batches over one episode at a time."""
    ratios = result["ratios"]
    return (f"2 workers {ratios['eval_2w_vs_loop']:.2f}× the loop, 1 worker {ratios['eval_1w_vs_loop']:.2f}; lockstep "
            f"batches {ratios['loop_vs_loop_batch1']:.2f}× one episode at a time ({_date(result)})")
