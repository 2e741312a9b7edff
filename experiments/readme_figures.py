"""The README's figures of the visuomotor, scaling and compute-model goals, each a function of a results file's
content; ``python -m experiments.render`` writes them into README.md's status table (``experiments.render``)."""

from __future__ import annotations

import statistics

from experiments.compute_scaling_report import CHECK_TOLERANCE
from experiments.scaling_report import TARGET


def kinds_over_expert_text(result: dict) -> str:
    """Per task, each policy kind's best success over the expert's and the lowest site's of the task's best:
    ``pick_place cnn 0.954, act 0.758 (lowest site 0.90); push ...``."""
    best: dict[str, dict[str, dict]] = {}
    for row in result["results"]:
        kinds = best.setdefault(row["task"], {})
        if row["policy"] not in kinds or row["policy_over_expert"] > kinds[row["policy"]]["policy_over_expert"]:
            kinds[row["policy"]] = row
    texts = []
    for task, kinds in best.items():
        top = max(kinds.values(), key=lambda row: row["policy_over_expert"])
        texts.append(f"{task} " + ", ".join(f"{kind} {row['policy_over_expert']:.3f}" for kind, row in kinds.items())
                     + f" (lowest site of the {top['policy']} {min(top['site_over_expert'].values()):.2f})")
    return "; ".join(texts)


def act_gpu_text(result: dict) -> str:
    """act's success over the expert's after its GPU training: ``0.896 after 5000 steps on NVIDIA H200 (...)``."""
    return (f"{result['policy']['pc_success'] / result['expert']['pc_success']:.3f} after {result['checkpoint_step']} "
            f"steps on {result['trained_on']['device']}")


def reach_text(result: dict) -> str:
    """Per task, the demonstrations that reach 90% of the expert by the fit over every point, and the smallest
    measured point that reaches it (else the best): ``pick_place ~192 by the fit (27 × 10 measure 0.93)``."""
    texts = []
    for task, fits in result["fits"].items():
        fit = fits["all"]["fit"]
        points = [point for point in result["points"] if point["task"] == task]
        reaching = [point for point in points if point["over_expert"] >= TARGET]
        shown = min(reaching, key=lambda point: point["demos"]) if reaching else max(
            points, key=lambda point: point["over_expert"])
        reach = "never by the fit" if fit["demos_to_reach_target"] is None else (
            f"~{fit['demos_to_reach_target']:,.0f} by the fit" + (", extrapolated" if fit["extrapolated"] else ""))
        texts.append(f"{task} {reach} ({'' if reaching else 'none measured reaches it, best '}{shown['robots']} × "
                     f"{shown['episodes_per_robot']} measure {shown['over_expert']:.2f})")
    return "; ".join(texts)


def compute_checks_text(result: dict) -> str:
    """How many CPU points the step model predicts within its tolerance, its worst errors either way, the rounds'
    median spread, and the GPU's one check."""
    checked = [row for row in result["checks"] if row["role"] == "check"]
    within = sum(abs(row["error"]) <= CHECK_TOLERANCE for row in checked)
    high, low = max(checked, key=lambda row: row["error"]), min(checked, key=lambda row: row["error"])
    spread = statistics.median(row["rounds_spread"] for row in checked)
    gpu = [f"{policy} {check['error']:+.0%}" for policy, check in result["gpu"]["checks"].items()]
    return (f"CPU: {within} of {len(checked)} points (worst {high['policy']} {high['point']} {high['error']:+.1%}, "
            f"{low['policy']} {low['point']} {low['error']:+.1%}; a point's rounds differ by {spread:.0%}). "
            f"GPU ({result['gpu']['device']}), its one recorded point: " + ", ".join(gpu))


def many_tasks_text(result: dict) -> str:
    """A runner's results of one test evaluation over many tasks with the expert beside: the policy's success over
    the expert's (every task has as many episodes, so this is over the tasks' average), both with the policy's 95%
    interval, the lowest task, and how many test evaluations the question has had."""
    test = next(iter(result["results"].values()))
    expert, tasks = test["expert"], test["per_task"]
    lowest = min(tasks, key=lambda task: tasks[task]["pc_success"])
    low, high = test["ci95"]
    return (f"{test['pc_success'] / expert['pc_success']:.2f} of the experts ({test['pc_success']:.1f}% "
            f"[{low:.1f}, {high:.1f}] against {expert['pc_success']:.1f}%; {len(tasks)} tasks, "
            f"{test['n_episodes']} test episodes), lowest task {lowest.split('/')[-1]} "
            f"{tasks[lowest]['pc_success']:.0f}%; test evaluations of the question: {test['test_evaluations']}")
