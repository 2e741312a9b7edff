"""The sim demo: scripted experts on a small fleet, with success per robot and per site.

    python -m sim.demo --robots 6 --episodes 3 --tasks reach push pick_place
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from core.errors import fail
from core.options import check_options, parse_config
from core.progress import progress_bar
from sim.fleet import episode_seed, make_fleet
from sim.rollout import run_episode
from sim.tasks import resolve_task


@dataclass
class DemoConfig:
    tasks: tuple[str, ...] = field(default=("reach", "push", "pick_place", "stack"), metadata={"help": "tasks to run"})
    robots: int = field(default=6, metadata={"help": "fleet size"})
    episodes: int = field(default=3, metadata={"help": "episodes per robot and task"})
    seed: int = field(default=0, metadata={"help": "fleet seed"})
    quiet: bool = field(default=False, metadata={"help": "no progress bar"})

    def __post_init__(self):
        if self.robots < 1 or self.episodes < 1:
            raise ValueError("--robots and --episodes must be at least 1")
        check_options(self, ("seed",), lambda value: value >= 0, "must not be negative")


def run_demo(config: DemoConfig) -> dict[str, dict[int, list[bool]]]:
    """Success flags per task and robot: ``{task: {robot_id: [success, ...]}}``."""
    specs = [resolve_task(name) for name in config.tasks]
    fleet = make_fleet(config.robots, config.seed)
    results: dict[str, dict[int, list[bool]]] = {spec.name: defaultdict(list) for spec in specs}
    total = len(specs) * len(fleet) * config.episodes
    with progress_bar(total=total, desc="episodes", unit="ep", disable=config.quiet) as progress:
        for spec in specs:
            for profile in fleet:
                env, expert = spec.make_env(profile), spec.make_expert(profile)
                for index in range(config.episodes):
                    seed = episode_seed(config.seed, profile.robot_id, index, stream="demo")
                    episode = run_episode(env, expert, seed, reset_policy=expert.reset)
                    results[spec.name][profile.robot_id].append(episode.success)
                    progress.update()
                env.close()
    return results


def print_report(config: DemoConfig, results: dict[str, dict[int, list[bool]]]) -> None:
    fleet = {profile.robot_id: profile for profile in make_fleet(config.robots, config.seed)}
    for task, per_robot in results.items():
        print(f"\n{task}: success per robot")
        per_site: dict[str, list[bool]] = defaultdict(list)
        for robot_id, flags in per_robot.items():
            site = fleet[robot_id].site
            per_site[site].extend(flags)
            print(f"  robot {robot_id:4d}  {site:9s}  {sum(flags)}/{len(flags)}  {100 * sum(flags) / len(flags):5.1f}%")
        print(f"{task}: success per site")
        for site, flags in per_site.items():
            print(f"  {site:9s}  {sum(flags)}/{len(flags)}  {100 * sum(flags) / len(flags):5.1f}%")
        every = [flag for flags in per_robot.values() for flag in flags]
        print(f"  {'fleet':9s}  {sum(every)}/{len(every)}  {100 * sum(every) / len(every):5.1f}%")


def main(argv: list[str] | None = None) -> None:
    config = parse_config(DemoConfig, __doc__, argv)
    try:
        results = run_demo(config)
    except ValueError as error:
        fail(str(error))
    print_report(config, results)


if __name__ == "__main__":
    main()
