"""Scripted-expert success over a whole fleet: the bar is 95% on every task.

Runs every task's expert on ``--robots`` fleet robots x ``--episodes`` episodes and
reports the success rate per task and per site. Writes
benchmarks/results/expert_success.json and appends to the table in benchmarks/README.md.

    python -m benchmarks.expert_success [--robots 100] [--episodes 5]
"""

from __future__ import annotations

import time
from collections import defaultdict

import sim  # first: it selects headless rendering before mujoco loads

from benchmarks.common import benchmark_parser, machine_facts, publish
from sim.demo import DemoConfig, run_demo
from sim.tasks import BUILTIN_TASKS


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--robots", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="+", default=list(BUILTIN_TASKS))
    args = parser.parse_args(argv)

    config = DemoConfig(tasks=tuple(args.tasks), robots=args.robots, episodes=args.episodes, seed=args.seed, quiet=True)
    start = time.perf_counter()
    results = run_demo(config)
    wall = time.perf_counter() - start
    site_of = {profile.robot_id: profile.site for profile in sim.make_fleet(args.robots, args.seed)}

    per_task = {}
    for task, per_robot in results.items():
        per_site = defaultdict(list)
        for robot_id, flags in per_robot.items():
            per_site[site_of[robot_id]].extend(flags)
        every = [flag for flags in per_robot.values() for flag in flags]
        per_task[task] = {
            "episodes": len(every),
            "success": sum(every),
            "pc_success": round(100 * sum(every) / len(every), 2),
            "per_site_pc_success": {site: round(100 * sum(f) / len(f), 2) for site, f in per_site.items()},
        }
    machine = machine_facts()
    result = {"benchmark": "expert_success", "machine": machine, "config": vars(config), "wall_s": round(wall, 1),
              "tasks": per_task}

    header = ["date", "code", "task", "robots x episodes", "fleet success", "office", "warehouse", "factory"]
    rows = [
        [machine["date"], machine["code_version"], task, f"{args.robots} x {args.episodes}",
         f'{t["pc_success"]:.1f}%', *(f'{t["per_site_pc_success"].get(site, float("nan")):.1f}%' for site in sim.SITES)]
        for task, t in per_task.items()
    ]
    publish("expert_success", result, header, rows, args)
    return result


if __name__ == "__main__":
    main()
