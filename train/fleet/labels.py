"""What fleet learning trains on: the seed demonstrations plus every expert-labelled stretch of deployment.

A round's store (train/fleet/deploy.py) holds whole deployed episodes. Only the frames whose
``labelled`` column is set carry the expert's action; each run of them that the expert acted
in becomes a training episode of its own (an ``EpisodeRef`` over that frame range), so an
action chunk never reaches into frames the policy acted in: past a stretch's end, the chunk is
padding and is not learned (HG-DAgger: only the expert's segments are labels). In ``bc`` the
expert's demonstrations train whole. In the ``dagger`` mode the policy acted in every frame
and the expert only labelled it, so each frame trains alone: its own label, the rest of its
chunk padding.

With ``own_successes``, the episodes the policy finished alone and succeeded in train whole too,
its own actions the targets (self-imitation, filtered to successes): the deployment's
successes cost no expert frame, and they show the policy more of the situations it already
handles, from more robots and seeds than the seed demonstrations hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from dataset.chunks import read_rows
from dataset.episodes import EpisodeRef, select_episodes
from dataset.fleet_store import FleetStore
from dataset.windows import WindowSpec
from train.policies.policy import PolicySpec

POLICY, EXPERT = 0, 1  # who acted at a frame: a round's ``acted_by`` column (train/fleet/deploy.py writes it)


def labelled_runs(labelled: np.ndarray) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of True in ``labelled``, end exclusive."""
    edges = np.diff(np.concatenate([[0], labelled.astype(np.int8).ravel(), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def labelled_segments(stores: Sequence[FleetStore]) -> list[EpisodeRef]:
    """Every labelled stretch of every episode in ``stores`` (deployment rounds), as episodes of its own: a run
    of frames the expert acted in, or one frame the policy acted in and the expert labelled (``dagger``).
    The labels after such a frame name what the expert would do in states the policy led to, so a chunk of
    them is no plan anyone carried out (a proportional "go up" repeated while the policy stayed put)."""
    segments = []
    for episode in select_episodes(stores, success=None):
        shard = stores[episode.store].shards[episode.robot_id]
        labelled = read_rows(shard, "data/labelled", episode.start, episode.end).ravel()
        acted = read_rows(shard, "data/acted_by", episode.start, episode.end).ravel() == EXPERT
        stretches = labelled_runs(labelled & acted) + [(t, t + 1) for t in np.flatnonzero(labelled & ~acted)]
        segments += [dataclasses.replace(episode, start=episode.start + start, end=episode.start + end)
                     for start, end in sorted(stretches)]
    return segments


def autonomous_successes(stores: Sequence[FleetStore]) -> list[EpisodeRef]:
    """Every episode in ``stores`` that succeeded with no frame acted or labelled by the expert."""
    episodes = []
    for episode in select_episodes(stores, success=True):
        shard = stores[episode.store].shards[episode.robot_id]
        labelled = read_rows(shard, "data/labelled", episode.start, episode.end)
        acted = read_rows(shard, "data/acted_by", episode.start, episode.end)
        if not labelled.any() and not (acted == EXPERT).any():
            episodes.append(episode)
    return episodes


class DeploymentLabels:
    """bc.py's labeller for fleet learning: the rounds' stores, their labelled segments (and, with
    ``own_successes``, the episodes the policy succeeded in alone), actions as stored."""

    def __init__(self, stores: list[FleetStore], own_successes: bool = False):
        self.stores, self.own_successes = stores, own_successes

    def __str__(self) -> str:
        return f"with the expert's labels from {len(self.stores)} deployment round(s)" + \
            (" and the policy's own successes" if self.own_successes else "")

    def episodes(self) -> list[EpisodeRef]:
        return labelled_segments(self.stores) + (autonomous_successes(self.stores) if self.own_successes else [])

    def window(self, spec: PolicySpec) -> WindowSpec:
        return WindowSpec.of(spec.n_obs_steps, spec.horizon, [*spec.features, "action"], spec.action_start)

    def __call__(self, batch):
        return batch
