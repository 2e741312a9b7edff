"""One round of deployment: the policy drives every robot of the fleet, operators step in where a gate asks.

``deploy_round`` runs on dask through collect's engine, one task per operator group
(train/fleet/operators.py): the task steps its robots in lockstep, one episode of each per
wave, with one batched forward pass of the policy a step (``FleetDriver``). Every episode is
recorded, failures included, in collect's shard format with two more columns:

- ``acted_by``: who acted at that frame, ``POLICY`` (0) or ``EXPERT`` (1);
- ``labelled``: the frame's ``action`` is the expert's (where it acted; in the ``dagger`` mode,
  where the expert names the action at every frame and the policy still acts, everywhere).

Episode seeds come from their own stream (``sim.fleet.episode_seed(..., "fleet", round)``).
A group commits each wave to its robots' stores, then adds the wave's expert steps to its
ledger (``.operators/group_G.json`` in the round's store), so a rerun after a crash skips the
waves that are done with the budget they spent, and replays (identically) the one that was cut.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from collect.config import CollectConfig
from collect.engine import TASK_RETRIES, CollectionSummary, probe_task, run_robot_tasks
from collect.worker import PROGRESS_TOPIC, Actor, RobotReport, to_features
from core.errors import crash_point
from core.files import code_version, write_json_atomic
from dataset.schema import features_of
from dataset.shard import store_name
from dataset.writer import EpisodeRecord, ShardWriter
from sim.fleet import RobotProfile, episode_seed
from sim.tasks import resolve_task
from train.checkpoint import load_policy, open_checkpoint
from train.fleet.driver import FleetDriver
from train.fleet.gates import GATES, MEASURES_DISAGREEMENT, GateOptions, ProgressTracker, Signals
from train.fleet.operators import Operator, ScriptedSupervisor, operator_groups, step_shares

POLICY, EXPERT = 0, 1
DEPLOY_FEATURES = {
    "acted_by": {"dtype": "uint8", "shape": [1], "names": None},
    "labelled": {"dtype": "bool", "shape": [1], "names": None},
}
LEDGERS = ".operators"


@dataclass(frozen=True)
class Help:
    """How help is given in a round: the mode (a gate of ``GATES``, ``dagger`` or ``bc``), its thresholds,
    the expert steps each hand-over lasts at most, and the operators' count."""

    mode: str
    gate: GateOptions
    segment_steps: int
    operators: int


@dataclass(frozen=True)
class GroupJob:
    """Everything a worker needs to deploy one operator's group for a round (plain, picklable data)."""

    group: int
    stores: tuple[str, ...]  # one per robot of the group
    profiles: tuple[dict, ...]
    task: str
    fleet_seed: int
    round: int
    episodes: int
    cameras: tuple[str, ...]
    image_size: int
    attrs: dict
    checkpoint: str
    help: Help
    help_steps: int  # this operator's share of the round's cap
    ledger: str


def deploy_group(job: GroupJob, report_progress=None) -> list[RobotReport]:
    """Deploy the policy on one group's robots for every wave not yet committed; their reports."""
    profiles = [RobotProfile.from_dict(profile) for profile in job.profiles]
    spec = resolve_task(job.task)
    envs = [spec.make_env(profile, cameras=job.cameras, image_size=job.image_size) for profile in profiles]
    features = {**features_of(envs[0]), **DEPLOY_FEATURES}
    policy, _ = load_policy(job.checkpoint)
    driver = FleetDriver(policy, measure=job.help.mode in MEASURES_DISAGREEMENT)
    supervisor = ScriptedSupervisor(spec, profiles)
    Path(job.ledger).parent.mkdir(parents=True, exist_ok=True)
    ledger = {int(wave): steps for wave, steps in _read_json(Path(job.ledger)).items()}
    operator = Operator(job.help_steps, job.help.segment_steps)
    steps = [0] * len(profiles)  # simulated by this run
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(ShardWriter(Path(path), {**job.attrs, "profile": profile}, features))
                   for path, profile in zip(job.stores, job.profiles)]
        done = [writer.done_indices() for writer in writers]
        for wave in range(job.episodes):
            if wave in ledger and all(wave in settled for settled in done):
                operator.steps_left -= ledger[wave]
                continue
            before = operator.steps_left
            records = run_wave(job, wave, envs, driver, supervisor, operator, features)
            steps = [done_steps + record.length for done_steps, record in zip(steps, records)]
            for writer, settled, record in zip(writers, done, records):
                if wave not in settled:
                    writer.commit([record], [])
                    crash_point("deploy-commit")
            ledger[wave] = before - operator.steps_left
            write_json_atomic(Path(job.ledger), {str(w): spent for w, spent in sorted(ledger.items())})
            if report_progress is not None:
                for profile in profiles:
                    report_progress(profile.robot_id, wave + 1)
        reports = [RobotReport(profile.robot_id, profile.site, writer.num_episodes, 0, writer.num_frames, simulated, 0.0)
                   for profile, writer, simulated in zip(profiles, writers, steps)]
    for env in envs:
        env.close()
    return reports


def run_wave(job: GroupJob, wave: int, envs: list, driver: FleetDriver, supervisor: ScriptedSupervisor,
             operator: Operator, features: dict) -> list[EpisodeRecord]:
    """One episode of every robot of the group, stepped in lockstep; the recorded episodes."""
    robots = len(envs)
    seeds = [episode_seed(job.fleet_seed, profile["robot_id"], wave, "fleet", job.round) for profile in job.profiles]
    observations = [env.reset(seed=seed)[0] for env, seed in zip(envs, seeds)]
    driver.reset()
    tracker = ProgressTracker(robots, job.help.gate)
    draws = np.random.default_rng([job.fleet_seed, job.round, job.group, wave])
    frames = [[] for _ in range(robots)]
    active, success = np.ones(robots, dtype=bool), np.zeros(robots, dtype=bool)
    mode, step = job.help.mode, 0
    if mode == "dagger":  # the labeller's style (speed, clearance) is drawn per episode, as a demonstration's
        for robot, seed in enumerate(seeds):
            supervisor.take_over(robot, seed)
    while active.any():
        batch = {name: np.stack([o[name] for o in observations]) for name in driver.policy.spec.features}
        actions, disagreement = driver(batch)
        helped, started = None, False
        if mode == "bc":  # a whole demonstration by the wave's robot, while steps are left
            helped = wave % robots if operator.steps_left and active[wave % robots] else None
            started = step == 0 and helped is not None
        elif mode in GATES:
            previous = operator.helping
            signals = Signals(tracker.since_progress, tracker.regress, disagreement, draws.random(robots))
            helped, started = operator.choose(GATES[mode](signals, job.help.gate), active)
            if previous is not None and (previous != helped or started):
                tracker.restart(previous)  # handed back: the policy gets a fresh start
        if started:
            supervisor.take_over(helped, seeds[helped] + step)
        for robot in np.flatnonzero(active):
            acted_by, action = POLICY, actions[robot]
            if robot == helped:
                acted_by, action = EXPERT, supervisor.act(robot, observations[robot])
                operator.spend()
            space = envs[robot].action_space
            action = np.clip(action, space.low, space.high)  # as the controller takes it, and within the store's bounds
            labelled = mode == "dagger" or acted_by == EXPERT
            recorded = np.clip(supervisor.label(robot, observations[robot]), space.low, space.high) \
                if mode == "dagger" else action
            observation, reward, terminated, truncated, info = envs[robot].step(action)
            frames[robot].append({**observations[robot], "action": recorded, "next.reward": reward,
                                  "next.success": info["is_success"], "acted_by": acted_by, "labelled": labelled})
            tracker.update(robot, reward)
            observations[robot] = observation
            success[robot] = info["is_success"]
            if terminated or truncated:
                active[robot] = False
                if robot == operator.helping:
                    operator.release()
        step += 1
    return [EpisodeRecord(wave, seed, bool(ok), to_features(_stack(robot_frames), features))
            for seed, ok, robot_frames in zip(seeds, success, frames)]


def _stack(frames: list[dict]) -> dict[str, np.ndarray]:
    return {key: np.stack([np.asarray(frame[key]) for frame in frames]) for key in frames[0]}


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def deploy_group_on_worker(job: GroupJob) -> list[RobotReport]:
    """``deploy_group`` as a dask task, its progress as collect's events (``PROGRESS_TOPIC``)."""
    from distributed import get_worker

    worker = get_worker()
    return deploy_group(job, lambda robot, settled: worker.log_event(PROGRESS_TOPIC,
                                                                     {"robot": robot, "settled": settled}))


def deploy_round(config: CollectConfig, checkpoint: str, round: int, help: Help, help_steps: int,
                 lineage: dict) -> CollectionSummary:
    """Deploy ``checkpoint`` on robots ``0..config.robots-1`` for ``config.episodes`` episodes each, into the
    round's store ``config.out``, with at most ``help.operators`` robots helped at once and ``help_steps``
    expert steps in all. Resumable; a finished round is a no-op."""
    lineage = {**lineage, "round": round, "mode": help.mode, "help_steps": help_steps, **asdict(help)}
    actor = Actor(resolve_task(config.task).make_expert, seed_stream="fleet", seed_round=round, lineage=lineage)
    spec, fleet, features, fps = probe_task(config, actor)
    described = open_checkpoint(checkpoint)
    if (trained := (described.task or {}).get("name")) != spec.name:
        raise ValueError(f"the policy in {checkpoint} was trained on {trained}, the fleet runs {spec.name}")
    if unseen := [name for name in described.spec.features if name not in features]:
        raise ValueError(f"the policy in {checkpoint} reads {unseen[0]}, which the fleet does not render here "
                         f"(it gives {', '.join(name for name in features if name.startswith('observation.'))})")
    features = {**features, **DEPLOY_FEATURES}
    out = Path(config.out)
    attrs = {"task": spec.name, "env_id": spec.env_id, "fps": fps, "code_version": code_version(),
             "data_config": config.data_config(), "lineage": lineage}
    groups = operator_groups([profile.robot_id for profile in fleet], help.operators)
    jobs = [GroupJob(group, tuple(str(out / store_name(robot)) for robot in robots),
                     tuple(fleet[robot].to_dict() for robot in robots), config.task, config.seed, round,
                     config.episodes, config.cameras, config.image_size, attrs, checkpoint, help, share,
                     str(out / LEDGERS / f"group_{group}.json"))
            for group, (robots, share) in enumerate(zip(groups, step_shares(help_steps, len(groups))))]
    targets = {profile.robot_id: config.episodes for profile in fleet}
    return run_robot_tasks(config, spec, features, fps, fleet, targets,
                           lambda client: [client.submit(deploy_group_on_worker, job, retries=TASK_RETRIES,
                                                         pure=False) for job in jobs],
                           lineage=lineage, preload=("train.fleet.deploy",))
