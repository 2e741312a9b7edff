"""The Meta-World figures of the docs, each a function of runner results files' content (``experiments.render``).

``demos_curve_text`` tables one question asked at several amounts of data: every results file of an MT50
declaration that differs only in how many episodes the fleet demonstrated (metaworld_mt50_state*.json), one row a
point, by demonstrations a task.
"""

from __future__ import annotations

import shlex

from eval.tasks import DIFFICULTIES


def demonstrations_per_task(result: dict) -> int:
    """The demonstrations a task behind a runner's results: robots x episodes of the collect command that ran,
    over the tasks evaluated."""
    words = shlex.split(result["provenance"]["commands"]["collect"])
    robots, episodes = (int(words[words.index(flag) + 1]) for flag in ("--robots", "--episodes"))
    return robots * episodes // len(_test(result)["per_task"])


def _test(result: dict) -> dict:
    return next(iter(result["results"].values()))


def demos_curve_text(results: dict[str, dict]) -> str:
    """A markdown table, one row per results file by demonstrations a task: the policy's success with its 95%
    interval, the expert's, their ratio, each difficulty group's success, the lowest task, and the test
    evaluations its question has had, with the results file named."""
    header = ["demos a task", "success [95%]", "expert", "ratio", *(g.split("/")[-1] for g in DIFFICULTIES),
              "lowest task", "test evaluations", "results"]
    rows = []
    for name, result in sorted(results.items(), key=lambda item: demonstrations_per_task(item[1])):
        test = _test(result)
        low, high = test["ci95"]
        tasks, groups = test["per_task"], test["per_group"]
        lowest = min(tasks, key=lambda task: tasks[task]["pc_success"])
        rows.append([f"{demonstrations_per_task(result):,}", f"{test['pc_success']:.1f}% [{low:.1f}, {high:.1f}]",
                     f"{test['expert']['pc_success']:.1f}%", f"{test['pc_success'] / test['expert']['pc_success']:.2f}",
                     *(f"{groups[group]['pc_success']:.0f}%" if group in groups else "-" for group in DIFFICULTIES),
                     f"{lowest.split('/')[-1]} {tasks[lowest]['pc_success']:.0f}%", str(test["test_evaluations"]),
                     f"[{name}](../experiments/results/{name}.json)"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
