"""What a policy was doing when the expert took a robot over: the fleet-learning rounds' hand-overs, sorted.

    .venv/bin/python -m experiments.fleet_stalls \
        --rounds runs/fleet_learning_push_9x10/stall_fresh/run/fleet/round_{1,2,3,4,5}

Each round store of train/fleet_learn.py records who acted at every frame. For every deployed episode that
the expert took over, this reads the ``--window`` frames the policy drove before the first hand-over and
sorts them into one of three kinds:

- ``bobbing beside the object``: the hand stayed within ``--near`` of the object in the table plane and
  went up and down: its height turned at least twice, each leg ``--travel`` or more;
- ``still beside the object``: within ``--near`` of it, without that;
- ``away from the object``: at some frame further than ``--near`` from it.

The push expert lifts and goes round the cube whenever its fingers are off the goal line by more than
half the cube's width plus 5 mm, and comes down behind it when they are on it: two opposite commands in
scenes a few millimetres apart. A policy that regresses both from 64-pixel images bobs between them.
Writes ``--results-dir``/fleet_stalls.json and prints one line per round.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.common import machine_facts, write_results
from core.errors import fail
from core.files import repo_relative
from core.options import parse_config
from dataset import FleetStore
from dataset.chunks import read_rows
from dataset.episodes import select_episodes
from train.fleet.labels import EXPERT

KINDS = ("bobbing beside the object", "still beside the object", "away from the object")
HAND, OBJECT = ("ee_x", "ee_y", "ee_z"), ("object_x", "object_y")  # the columns read, by their feature names


@dataclass
class FleetStallsConfig:
    rounds: tuple[str, ...] = field(default=(), metadata={
        "help": "round stores of a train/fleet_learn.py run (OUT/fleet/round_N), in order"})
    window: int = field(default=30, metadata={"help": "policy frames read before each hand-over"})
    near: float = field(default=0.06, metadata={"help": "metres: the hand is beside the object within this"})
    travel: float = field(default=0.01, metadata={"help": "metres: the least rise or fall that counts as a leg"})
    results_dir: str = field(default="experiments/results", metadata={"help": "where fleet_stalls.json is written"})

    def __post_init__(self):
        if not self.rounds:
            raise ValueError("--rounds needs at least one round store")
        if self.window < 3 or self.near <= 0 or self.travel <= 0:
            raise ValueError("--window must be at least 3, --near and --travel positive")


def height_turns(heights: np.ndarray, travel: float) -> int:
    """How many times ``heights`` turns from rising to falling or back, counting only legs of ``travel`` or more."""
    turns, direction, extreme = 0, 0, float(heights[0])
    for height in heights[1:]:
        if direction >= 0 and height < extreme - travel:
            turns, direction, extreme = turns + (direction > 0), -1, float(height)
        elif direction <= 0 and height > extreme + travel:
            turns, direction, extreme = turns + (direction < 0), 1, float(height)
        elif (direction > 0 and height > extreme) or (direction < 0 and height < extreme):
            extreme = float(height)
    return turns


def stall_kind(hand_xy: np.ndarray, hand_z: np.ndarray, object_xy: np.ndarray, config: FleetStallsConfig) -> str:
    """One of ``KINDS`` for the frames before a hand-over: hand and object positions, one row a frame."""
    if np.linalg.norm(hand_xy - object_xy, axis=1).max() >= config.near:
        return KINDS[2]
    return KINDS[0] if height_turns(hand_z, config.travel) >= 2 else KINDS[1]


def columns(store: FleetStore, directory: str) -> tuple[list[int], list[int]]:
    """Where the hand (x, y, z) sits in ``observation.state`` and the object (x, y) in
    ``observation.environment_state``, from the store's features; a one-line error for a store that is not a
    fleet-learning round of a task with an object."""
    features = (store.manifest or {}).get("features", {})
    state = features.get("observation.state", {}).get("names", [])
    environment = features.get("observation.environment_state", {}).get("names", [])
    if "acted_by" not in features or not set(HAND) <= set(state) or not set(OBJECT) <= set(environment):
        fail(f"{directory} is not a fleet-learning round of a task with an object (no acted_by, ee_x or object_x)")
    return [state.index(name) for name in HAND], [environment.index(name) for name in OBJECT]


def round_stalls(store: FleetStore, hand: list[int], object_xy: list[int], config: FleetStallsConfig) -> dict:
    """Episodes, hand-overs and hand-overs of each kind in one round store (``hand`` and ``object_xy``: the
    columns of ``columns``)."""
    kinds, episodes = Counter(), 0
    for episode in select_episodes([store], success=None):
        episodes += 1
        shard = store.shards[episode.robot_id]
        acted = read_rows(shard, "data/acted_by", episode.start, episode.end).ravel()
        taken_over = np.flatnonzero(acted == EXPERT)
        if len(taken_over) == 0 or taken_over[0] < 3:
            continue
        start, stop = episode.start + max(0, taken_over[0] - config.window), episode.start + taken_over[0]
        state = read_rows(shard, "data/observation.state", start, stop)
        environment = read_rows(shard, "data/observation.environment_state", start, stop)
        kinds[stall_kind(state[:, hand[:2]], state[:, hand[2]], environment[:, object_xy], config)] += 1
    return {"episodes": episodes, "hand_overs": sum(kinds.values()), "kinds": {kind: kinds[kind] for kind in KINDS}}


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(FleetStallsConfig, __doc__, argv)
    command = "python -m experiments.fleet_stalls " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = []
    for directory in config.rounds:
        try:
            store = FleetStore.open(directory)
        except (FileNotFoundError, ValueError) as error:
            fail(str(error))
        row = {"round": repo_relative(directory), **round_stalls(store, *columns(store, directory), config)}
        rows.append(row)
        shares = ", ".join(f"{kind} {count} ({100 * count / max(row['hand_overs'], 1):.0f}%)"
                           for kind, count in row["kinds"].items())
        print(f"{directory}: {row['episodes']} episodes, {row['hand_overs']} hand-overs: {shares}")
    result = {"experiment": "fleet_stalls", "machine": machine_facts(), "config": asdict(config),
              "command": command, "rounds": rows}
    write_results("fleet_stalls", result, Path(config.results_dir))
    return result


if __name__ == "__main__":
    main()
