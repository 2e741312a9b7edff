"""Where a cube policy fails: success against the turn its grasp needs, per site.

    .venv/bin/python -m experiments.grasp_yaw --evaluations runs/full_run_visuomotor/pick_place/cnn/eval [...]

The scripted experts square the fingers with the cube's faces before they grasp, turning the
gripper by the cube's yaw offset wrapped to +-45 degrees (``sim.experts.squaring_turn``). Near
45 degrees the shortest turn flips from one way to the other, so the demonstrations of two nearly
identical scenes turn opposite ways. A policy that regresses the average of its demonstrations
turns neither way there; with a cube whose diagonal nearly fills the open gripper (warehouse) the
unturned grasp slips.

For each evaluation (an ``evaluate`` output directory), this resets every episode's robot with the
episode's seed, reads the turn at reset, and counts episodes and successes per site and band of
|turn|. Writes ``--results-dir``/grasp_yaw.json and prints the table; the evaluations recorded there
before with the same bands stay beside the new ones, each under the command that counted it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import sim  # noqa: F401  (first: headless rendering before mujoco loads)

import numpy as np

from benchmarks.common import machine_facts, write_results
from core.errors import fail
from core.files import repo_relative
from core.options import parse_config
from experiments.common import merged_rows
from sim.experts import squaring_turn
from sim.fleet import SITES, make_robot
from sim.tasks import resolve_task

CUBE_TASKS = ("push", "pick_place", "stack")


@dataclass
class GraspYawConfig:
    evaluations: tuple[str, ...] = field(default=(), metadata={
        "help": "evaluate output directories (each with eval_info.json) of a cube task"})
    bands: tuple[float, ...] = field(default=(0.0, 30.0, 38.0, 42.0, 45.0), metadata={
        "help": "edges of the |turn| bands, degrees"})
    results_dir: str = field(default="experiments/results", metadata={"help": "where grasp_yaw.json is written"})

    def __post_init__(self):
        if not self.evaluations:
            raise ValueError("--evaluations needs at least one evaluate output directory")
        if list(self.bands) != sorted(self.bands) or len(self.bands) < 2:
            raise ValueError(f"--bands must be two or more rising edges, got {' '.join(map(str, self.bands))}")


def turns_at_reset(info: dict) -> list[float]:
    """|squaring turn| at reset, degrees, of every episode of an eval_info (same order)."""
    spec = resolve_task(info["task"])
    fleet_seed = info["setup"]["fleet_seed"]
    envs, turns = {}, []
    for episode in info["per_episode"]:
        robot = episode["robot_id"]
        if robot not in envs:
            envs[robot] = spec.make_env(make_robot(robot, fleet_seed))
        observation, _ = envs[robot].reset(seed=episode["seed"])
        turns.append(abs(float(np.degrees(squaring_turn(observation)))))
    for env in envs.values():
        env.close()
    return turns


def banded(info: dict, turns: list[float], edges: tuple[float, ...]) -> dict:
    """{site: [{band, episodes, successes}]}: episodes and successes per site and |turn| band."""
    table = {}
    for site in SITES:
        rows = []
        for low, high in zip(edges, edges[1:]):
            inside = [episode["success"] for episode, turn in zip(info["per_episode"], turns)
                      if episode["site"] == site and low <= turn < high + (high == edges[-1]) * 1e-9]
            rows.append({"band": [low, high], "episodes": len(inside), "successes": int(sum(inside))})
        table[site] = rows
    return table


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(GraspYawConfig, __doc__, argv)
    command = "python -m experiments.grasp_yaw " + " ".join(argv if argv is not None else sys.argv[1:])
    facts = machine_facts()
    evaluations = []
    for directory in config.evaluations:
        path = Path(directory) / "eval_info.json"
        if not path.exists():
            fail(f"{directory} holds no eval_info.json (give evaluate's --out directory)")
        info = json.loads(path.read_text())
        if info["task"] not in CUBE_TASKS:
            fail(f"{directory} evaluated {info['task']}; the squaring turn is defined for {', '.join(CUBE_TASKS)}")
        table = banded(info, turns_at_reset(info), config.bands)
        evaluations.append({"evaluation": repo_relative(directory), "task": info["task"],
                            "checkpoint": info["checkpoint"] and repo_relative(info["checkpoint"]["path"]),
                            "per_site": table, "measured": {**facts, "command": command}})
        print(f"{directory}:")
        for site, rows in table.items():
            cells = [f"{r['band'][0]:.0f}-{r['band'][1]:.0f} deg: {r['episodes'] - r['successes']}/{r['episodes']} failed"
                     for r in rows]
            print(f"  {site:9s} " + "; ".join(cells))
    path = Path(config.results_dir) / "grasp_yaw.json"
    recorded = json.loads(path.read_text()) if path.exists() else None
    if recorded and recorded["config"]["bands"] != list(config.bands):
        recorded = None  # other bands: the recorded counts do not sit beside these
    result = {"experiment": "grasp_yaw", "machine": facts, "config": asdict(config), "command": command,
              "evaluations": merged_rows(recorded, evaluations, lambda row: row["evaluation"], "evaluations")}
    write_results("grasp_yaw", result, Path(config.results_dir))
    return result


if __name__ == "__main__":
    main()
