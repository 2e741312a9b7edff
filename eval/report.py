"""From episode records to success figures: per robot, per site, per task, fleet; the console table.

With many tasks the figures also go per difficulty group (``per_group``: LeRobot's Meta-World
groups ``metaworld/easy`` ... ``metaworld/very_hard``, each task in the one that lists it), and a
second table shows them per task and per group.

Every group gets ``n_episodes``, ``n_success``, ``pc_success`` and ``ci95``, a 95%
Wilson score interval in percent (it stays inside [0, 100] and is sensible at 0% and
100% and for small counts, where the normal approximation is not). An episode that
crashed counts as a failure; ``n_errors`` says how many did.

The lerobot-eval keys (``per_episode``, ``aggregated`` with ``avg_sum_reward``,
``avg_max_reward``, ``pc_success``, ``eval_s``, ``eval_ep_s``) are kept as they are.
``eval_s`` is the wall time from the first task submitted to the last result (the dask
cluster's start and stop excluded), and ``eval_ep_s`` that time per episode run
(with ``--compare``, the policy's and the expert's episodes ran together). A figure that
does not exist (the success rate of no episodes) is ``null``, never NaN, so the JSON is strict.
"""

from __future__ import annotations

import math
from collections import defaultdict

from eval.tasks import DIFFICULTIES, by_difficulty, difficulty
from sim.fleet import SITES

Z_95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z_95) -> list[float]:
    """The Wilson score interval of a binomial proportion, in percent: [low, high]."""
    if n == 0:
        return [0.0, 100.0]
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(100 * max(0.0, centre - half), 2), round(100 * min(1.0, centre + half), 2)]


def summarise(records: list[dict]) -> dict:
    """Success counts, rate and interval of a group of episodes."""
    n, successes = len(records), sum(bool(r["success"]) for r in records)
    return {"n_episodes": n, "n_success": successes, "pc_success": 100 * successes / n if n else None,
            "ci95": wilson_interval(successes, n), "n_errors": sum(r["error"] is not None for r in records)}


def _grouped(records: list[dict], key: str) -> dict:
    """``{value of key: summary}``; sites in the fleet's order (office, warehouse, factory), others sorted."""
    groups: dict = defaultdict(list)
    for record in records:
        groups[record[key]].append(record)
    order = sorted(groups, key=lambda name: (SITES.index(name) if name in SITES else len(SITES), name))
    return {name: summarise(groups[name]) for name in order}


def evaluation_tables(records: list[dict], eval_s: float, episodes_run: int) -> dict:
    """``per_episode``, ``per_robot``, ``per_site``, ``per_task`` (easy to very_hard, ``eval.tasks.by_difficulty``),
    ``fleet`` and lerobot's ``aggregated``; with more than one task, ``per_group`` too.

    ``eval_s`` is the rollouts' wall time, in which ``episodes_run`` episodes ran (every agent's).
    """
    records = sorted(records, key=lambda r: (r["robot_id"], r["episode"]))
    per_robot = [{"robot_id": robot_id, "site": members[0]["site"], "task": members[0]["task"], **summarise(members)}
                 for robot_id, members in _by_robot(records).items()]
    rewards = [r["sum_reward"] for r in records]
    max_rewards = [r["max_reward"] for r in records if r["max_reward"] is not None]
    fleet = summarise(records)
    per_task = _grouped(records, "task")
    per_task = {task: per_task[task] for task in by_difficulty(per_task)}
    return {
        "per_episode": records,
        "per_robot": per_robot,
        "per_site": _grouped(records, "site"),
        "per_task": per_task,
        **({"per_group": per_group(records)} if len(per_task) > 1 else {}),
        "fleet": {"n_robots": len(per_robot), **fleet},
        "aggregated": {"avg_sum_reward": sum(rewards) / len(rewards),
                       "avg_max_reward": sum(max_rewards) / len(max_rewards) if max_rewards else None,
                       "pc_success": fleet["pc_success"], "eval_s": eval_s, "eval_ep_s": eval_s / episodes_run},
    }


def per_group(records: list[dict]) -> dict:
    """``{difficulty group: summary}`` of the episodes of the tasks each group lists, easy to very_hard; groups
    with no episode, and tasks in none of them, are left out."""
    groups = {group: [r for r in records if difficulty(r["task"]) == group] for group in DIFFICULTIES}
    return {group: summarise(members) for group, members in groups.items() if members}


def _by_robot(records: list[dict]) -> dict[int, list[dict]]:
    robots: dict[int, list[dict]] = defaultdict(list)
    for record in records:
        robots[record["robot_id"]].append(record)
    return dict(sorted(robots.items()))


def _ratio(policy: float, expert: float) -> float | None:
    return policy / expert if expert else None


def comparison(policy: dict, expert: dict) -> dict:
    """Policy against expert on the same robots and seeds: per robot, per site and fleet."""
    experts = {row["robot_id"]: row for row in expert["per_robot"]}
    per_robot = [{"robot_id": row["robot_id"], "site": row["site"], "policy_pc_success": row["pc_success"],
                  "expert_pc_success": experts[row["robot_id"]]["pc_success"],
                  "policy_over_expert": _ratio(row["pc_success"], experts[row["robot_id"]]["pc_success"])}
                 for row in policy["per_robot"]]
    groups = {f"site {site}": (figures, expert["per_site"][site]) for site, figures in policy["per_site"].items()}
    if "per_group" in policy:
        groups.update({f"task {task}": (figures, expert["per_task"][task])
                       for task, figures in policy["per_task"].items()})
        groups.update({f"group {group}": (figures, expert["per_group"][group])
                       for group, figures in policy["per_group"].items()})
    groups["fleet"] = (policy["fleet"], expert["fleet"])
    summary = {name: {"policy_pc_success": p["pc_success"], "expert_pc_success": e["pc_success"],
                      "policy_over_expert": _ratio(p["pc_success"], e["pc_success"])} for name, (p, e) in groups.items()}
    return {"per_robot": per_robot, **summary}


def _row(name: str, robots: int, figures: dict, expert: dict | None, width: int = 10) -> str:
    low, high = figures["ci95"]
    line = f"{name:{width}s} {robots:6d} {figures['n_episodes']:8d} {figures['pc_success']:7.1f}% {f'[{low:.1f}, {high:.1f}]':>14s}"
    if expert is not None:
        ratio = _ratio(figures["pc_success"], expert["pc_success"])
        line += f" {expert['pc_success']:7.1f}% {'-' if ratio is None else f'{ratio:.2f}':>7s}"
    return line + (f"  ({figures['n_errors']} crashed)" if figures["n_errors"] else "")


def headline(info: dict) -> str:
    """The console's first line: what ran on what, the inputs the policy reads, and where its seeds come from."""
    checkpoint = info.get("checkpoint") or {}
    reads = ""
    if checkpoint:
        features = checkpoint.get("features", [])
        listed = f" ({', '.join(features)})" if features and "+".join(features) != checkpoint["inputs"] else ""
        reads = f"; reads {checkpoint['inputs']}{listed}"
    tested = (f"; test evaluation {info['test_evaluations']} of the question {info['question']!r} in the ledger"
              if "test_evaluations" in info else "")
    tasks = info["setup"].get("tasks")
    runs = (f"{len(tasks)} tasks x {info['config']['episodes']} episodes on {info['fleet']['n_robots']} robots"
            if tasks else f"{info['fleet']['n_robots']} robots x {info['config']['episodes']} episodes")
    fixed = "; fixed positions (MT50's)" if info["setup"]["positions"] == "fixed" else ""
    return f"{info['agent']} on {info['task']}: {runs}{reads}{fixed}; seeds: {info['setup']['held_out']}{tested}"


def _header(first: str, width: int, compared: bool) -> str:
    header = f"{first:{width}s} {'robots':>6s} {'episodes':>8s} {'success':>8s} {'ci95':>14s}"
    return header + (f" {'expert':>8s} {'ratio':>7s}" if compared else "")


def format_table(info: dict) -> str:
    """The console table: one row per site and one for the fleet (with the expert beside, when compared)."""
    expert = info.get("expert")
    robots_per_site = defaultdict(int)
    for row in info["per_robot"]:
        robots_per_site[row["site"]] += 1
    lines = [_header("site", 10, expert is not None)]
    for site, figures in info["per_site"].items():
        lines.append(_row(site, robots_per_site[site], figures, expert and expert["per_site"][site]))
    lines.append(_row("fleet", info["fleet"]["n_robots"], info["fleet"], expert and expert["fleet"]))
    return "\n".join(lines)


def format_task_table(info: dict) -> str:
    """With many tasks, the second console table: one row per task, then one per difficulty group."""
    expert = info.get("expert")
    robots = defaultdict(int)
    for row in info["per_robot"]:
        robots[row["task"]] += 1
        robots[difficulty(row["task"])] += 1
    width = max(map(len, [*info["per_task"], *info["per_group"], "task"]))
    lines = [_header("task", width, expert is not None)]
    for key in ("per_task", "per_group"):
        lines += [_row(name, robots[name], figures, expert and expert[key][name], width)
                  for name, figures in info[key].items()]
    return "\n".join(lines)


def format_comparison(info: dict) -> str:
    """Policy against expert per robot (for --compare)."""
    lines = [f"{'robot':>6s} {'site':10s} {'policy':>8s} {'expert':>8s}"]
    for row in info["compare"]["per_robot"]:
        lines.append(f"{row['robot_id']:6d} {row['site']:10s} {row['policy_pc_success']:7.1f}% "
                     f"{row['expert_pc_success']:7.1f}%")
    return "\n".join(lines)
