"""The README's speed figures, each a function of the content of the benchmark results file that measured it.

``python -m experiments.render`` writes them into README.md's status table (``experiments.render.SECTIONS``) and
``--check`` fails when one differs from its file. A results file holds its benchmark's latest run, so a figure is
that run's; earlier runs are the rows of benchmarks/README.md's tables.
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
