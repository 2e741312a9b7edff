"""DAgger's rounds for train/distill.py: the student drives on the fleet, the teacher labels.

One round rolls the student out on the robots it trains on (on dask, through
collect's engine, one task and one writer per robot), records each state it visits with
the action the teacher takes there, and writes those episodes, failures included, as a new
fleet store in collect's shard format. Its manifest and shards carry a ``lineage``: the
round, the teacher, the student checkpoint that drove and the store it was trained on.
Episode seeds come from their own stream (``sim.fleet.episode_seed(..., "dagger", round)``),
so they never repeat a demonstration's or an evaluation's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collect.config import CollectConfig
from collect.engine import run_collection
from collect.worker import Actor
from dataset import FleetStore
from sim.fleet import RobotProfile
from train.checkpoint import latest_checkpoint, load_policy, open_checkpoint
from train.policies.policy import Policy


class DaggerAgent:
    """The student acts (``__call__``); the teacher, predicting afresh at every step, labels (``label``)."""

    def __init__(self, student: Policy, teacher: Policy):
        self.student, self.teacher = student, teacher

    def reset(self, seed: int) -> None:
        self.student.reset()
        self.teacher.reset()

    def __call__(self, observation: dict) -> np.ndarray:
        return self.student.select_action(observation)

    def label(self, observation: dict) -> np.ndarray:
        return self.teacher.select_action(observation)


@dataclass(frozen=True)
class DaggerAgents:
    """Makes a robot's ``DaggerAgent`` in a collect worker, from checkpoint paths (so it pickles)."""

    student: str
    teacher: str

    def __call__(self, profile: RobotProfile) -> DaggerAgent:
        student, _ = load_policy(Path(self.student))
        teacher, _ = load_policy(Path(self.teacher), n_action_steps=1)
        return DaggerAgent(student, teacher)


def round_directory(run: Path, round: int) -> Path:
    return Path(run) / "dagger" / f"round_{round}"


def collect_round(run: Path, round: int, teacher: str, store: FleetStore, robots: list[int], episodes: int,
                  workers: int, quiet: bool = False) -> Path:
    """Roll the student of ``run`` (its latest checkpoint, kept as the round's ``round_N_student``) out for
    ``episodes`` on each of ``robots`` (robots of ``store``, the fleet it trained on) and write the
    teacher-labelled episodes to the round's store.
    The teacher's checkpoint is kept too, as ``round_N_teacher``: the workers load that copy, which a
    teacher still training cannot prune away.
    Resumable: a rerun keeps the round's student and teacher and collects only the missing episodes."""
    out = round_directory(run, round)
    student, pinned_teacher = (out.parent / f"round_{round}_{role}" for role in ("student", "teacher"))
    out.parent.mkdir(parents=True, exist_ok=True)
    if not student.exists():  # the student that drives this round, whatever trains later
        open_checkpoint(latest_checkpoint(run)).write(student)
    if not pinned_teacher.exists():
        open_checkpoint(Path(teacher)).write(pinned_teacher)
    data = store.manifest["data_config"]
    config = CollectConfig(robots=max(robots) + 1, episodes=episodes, task=store.manifest["task"]["reference"],
                           out=str(out), seed=data["seed"], cameras=tuple(data["cameras"]),
                           image_size=data["image_size"], keep_failures=True, workers=workers, quiet=quiet)
    lineage = {"source": "dagger", "round": round, "teacher": teacher, "student": str(student),
               "trained_on": str(store.path)}
    actor = Actor(DaggerAgents(str(student), str(pinned_teacher)), seed_stream="dagger", seed_round=round,
                  lineage=lineage)
    summary = run_collection(config, robot_episodes={robot: episodes for robot in robots}, actor=actor)
    if not quiet:
        print(f"DAgger round {round}: {summary.episodes} episodes by the student, labelled by the teacher, "
              f"in {out}")
    return out
