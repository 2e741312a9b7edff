"""Publish recorded fleet-learning runs again from their results files alone, with behaviour cloning's points as
they are recorded now.

    python -m experiments.fleet_learning_republish fleet_learning_push_5x10_10_step_hand_overs_fresh_2_modes_ee_dz_4_action_steps

A run's "BC needs (share)" column and its plot read behaviour cloning's curve off every results file
(experiments/fleet_learning_report.py). A new point on that curve changes them, though the run itself is unchanged.
This rewrites each named run's results file, page (experiments/runs/NAME.md) and plot from what the file recorded
(its config, command, runs, expert, seconds and machine) and the curve of now. It runs nothing, and needs none of the run's folders.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from core.errors import fail
from experiments.common import recorded_config
from experiments.fleet_learning import FleetLearningConfig
from experiments.fleet_learning_report import publish, recorded_expert

RESULTS = Path("experiments/results")


def published_config(result: dict) -> FleetLearningConfig:
    """The run's config as its results recorded it, under its recorded name (options since added take their
    defaults; options since removed are dropped), published where runs are published now."""
    published = {key: value for key, value in result["config"].items() if key not in ("docs", "media", "results_dir")}
    return recorded_config(FleetLearningConfig, published, results_name=result["experiment"])


def republish(name: str, results_dir: Path = RESULTS, docs: str = "", media: str = "") -> dict:
    """Publish the run of ``results_dir/name.json`` again (results, page, plot); the new results. ``docs`` (the
    page's folder) and ``media`` replace where the page and the plot go."""
    path = results_dir / f"{name}.json"
    if not path.is_file():
        fail(f"{path} is not a recorded fleet-learning run")
    result = json.loads(path.read_text())
    if "runs" not in result or "config" not in result:
        fail(f"{path} records no runs to publish again (written before results kept them)")
    config = published_config(result)
    config.results_dir = str(results_dir)
    config.docs, config.media = docs or config.docs, media or config.media
    return publish(config, result["command"], recorded_expert(result), result["runs"], result["seconds"],
                   machine=result["machine"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", help="results names (experiments/results/NAME.json)")
    parser.add_argument("--results-dir", default=str(RESULTS), help="where NAME.json is")
    args = parser.parse_args(argv)
    for name in args.names:
        republish(name, Path(args.results_dir))


if __name__ == "__main__":
    main()
