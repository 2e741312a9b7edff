"""The dev and test splits: where choices are made, and where figures are reported.

Every evaluation runs on one split (``evaluate --split``):

- ``dev``, the default, is where every choice is made: hyper-parameters, rounds, variants,
  ``--n-action-steps``, which training seeds to keep. Its episodes come from the
  ``evaluate`` seed stream, on robots below ``sim.fleet.TEST_ROBOTS``.
- ``test`` is where reported figures come from. Its episodes come from the ``test``
  stream, shifted past 2**32: every other stream's seeds are 32-bit numbers, so a test
  episode can never be a dev, collection or rollout episode. The robot ids from
  ``TEST_ROBOTS`` on are a held-out block that only a test evaluation may use (collect
  refuses them too): ``--split test --robot-offset 1000000`` reports on robots that no
  choice ever saw. Test evaluations may also run on the training robots, with new seeds.

Each test evaluation adds a line to the test ledger (eval/ledger.py), so a reported
figure can say how many test evaluations its question had.
"""

from __future__ import annotations

from sim.fleet import TEST_ROBOTS, episode_seed

SPLITS = ("dev", "test")
TEST_SEED_BASE = 2**32  # above every 32-bit seed of the other streams
STREAMS = {"dev": "evaluate", "test": "test"}


def split_seed(split: str, fleet_seed: int, robot_id: int, index: int) -> int:
    """The reset seed of episode ``index`` of robot ``robot_id`` in ``split``."""
    seed = episode_seed(fleet_seed, robot_id, index, stream=STREAMS[split])
    return seed + TEST_SEED_BASE if split == "test" else seed


def check_robots(split: str, first: int, count: int) -> None:
    """A one-line ``ValueError`` where a dev evaluation would reach the test split's robots."""
    last = first + count - 1
    if split == "dev" and last >= TEST_ROBOTS:
        raise ValueError(f"robots {first}..{last} reach the test split's held-out block (robot ids from "
                         f"{TEST_ROBOTS:,} on), which a dev evaluation never uses: report on them with --split test")


def describe(split: str) -> str:
    """How a split's episodes are held out, for eval_info.json."""
    if split == "dev":
        return "dev split: evaluate seed stream"
    return "test split: test seed stream (seeds from 2**32 on, disjoint from every other stream)"
