"""The accounts of fleet learning, read from the stores themselves: what the expert's help cost and bought.

- **expert-labelled frames**: frames whose action is the expert's, the seed demonstrations
  counted (every frame of the seed episodes the run trains on) plus each round's ``labelled``
  frames;
- **ROHE** (return on human effort, Fleet-DAgger): a round's deployment successes per 1,000
  of its expert-labelled frames;
- **autonomy**: the share of a round's steps the policy acted in;
- **hand-overs**: how often an operator took a robot over (runs of ``acted_by`` = expert),
  per robot and per site.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from dataset.chunks import read_rows
from dataset.episodes import EpisodeRef, select_episodes
from dataset.fleet_store import FleetStore
from train.fleet.labels import labelled_runs


def round_account(store: FleetStore) -> dict:
    """One deployment round's figures, for the fleet and per site and robot."""
    fleet = defaultdict(int)
    sites: dict[str, dict] = defaultdict(lambda: defaultdict(int))
    robots: dict[int, dict] = defaultdict(lambda: defaultdict(int))
    for episode in select_episodes(store, success=None):
        shard = store.shards[episode.robot_id]
        acted = read_rows(shard, "data/acted_by", episode.start, episode.end).ravel().astype(bool)
        labelled = read_rows(shard, "data/labelled", episode.start, episode.end).ravel()
        counts = {"episodes": 1, "successes": int(episode.success), "frames": episode.length,
                  "expert_acted": int(acted.sum()), "labelled": int(labelled.sum()),
                  "handovers": len(labelled_runs(acted))}
        for totals in (fleet, sites[episode.site], robots[episode.robot_id]):
            for key, value in counts.items():
                totals[key] += value
    return {**_rates(fleet), "sites": {site: _rates(totals) for site, totals in sorted(sites.items())},
            "robots": {str(robot): _rates(totals) for robot, totals in sorted(robots.items())}}


def _rates(totals: dict) -> dict:
    """``totals`` with success rate, autonomy and ROHE beside the counts."""
    totals = dict(totals)
    frames, labelled = totals.get("frames", 0), totals.get("labelled", 0)
    return {**totals, "success": totals.get("successes", 0) / max(1, totals.get("episodes", 0)),
            "autonomy": 1 - totals.get("expert_acted", 0) / frames if frames else 0.0,
            "rohe": 1000 * totals.get("successes", 0) / labelled if labelled else None}


def seed_frames(episodes: Sequence[EpisodeRef]) -> int:
    """Expert-labelled frames of the seed demonstrations a run trains on: all of their frames."""
    return int(sum(episode.length for episode in episodes))


def run_accounts(seed_labelled: int, rounds: Sequence[FleetStore]) -> list[dict]:
    """Per round (0: the seed demonstrations alone), its account and the expert-labelled frames so far."""
    accounts, total = [{"round": 0, "labelled_so_far": seed_labelled}], seed_labelled
    for number, store in enumerate(rounds, start=1):
        account = round_account(store)
        total += account["labelled"]
        accounts.append({"round": number, **account, "labelled_so_far": total})
    return accounts


def format_accounts(accounts: list[dict]) -> str:
    """The accounts as a table a person reads: one row per round."""
    lines = [f"{'round':>5s} {'episodes':>8s} {'success':>8s} {'autonomy':>8s} {'hand-overs':>10s} "
             f"{'labelled':>9s} {'ROHE':>6s} {'labelled so far':>15s}"]
    for account in accounts:
        if account["round"] == 0:
            lines.append(f"{0:5d} {'seed':>8s} {'':>8s} {'':>8s} {'':>10s} {account['labelled_so_far']:9d} "
                         f"{'':>6s} {account['labelled_so_far']:15d}")
            continue
        rohe = "-" if account["rohe"] is None else f"{account['rohe']:.2f}"
        lines.append(f"{account['round']:5d} {account['episodes']:8d} {account['success']:8.1%} "
                     f"{account['autonomy']:8.1%} {account['handovers']:10d} {account['labelled']:9d} {rohe:>6s} "
                     f"{account['labelled_so_far']:15d}")
    return "\n".join(lines)


def mean_success(accounts: list[dict]) -> float:
    """Deployment success over every round's episodes."""
    episodes = sum(a.get("episodes", 0) for a in accounts)
    return float(np.divide(sum(a.get("successes", 0) for a in accounts), max(1, episodes)))
