"""One round of deployment: the policy drives every robot of the fleet, operators step in where a gate asks.

``deploy_round`` runs on dask through collect's engine, one task per operator group
(train/fleet/operators.py): the task steps its robots in lockstep, with one batched forward
pass of the policy a step (``FleetDriver``). By default the robots go in waves: every robot of
the group runs one episode, and the next wave starts when the last of them ends. With
``Help.continuous`` a robot starts its next episode as soon as one ends, as a deployed fleet
does, so the operators always watch a full group of robots. Every episode is recorded,
failures included, in collect's shard format with two more columns:

- ``acted_by``: who acted at that frame, ``POLICY`` (0) or ``EXPERT`` (1);
- ``labelled``: the frame's ``action`` is the expert's (where it acted; in the ``dagger`` mode,
  where the expert names the action at every frame and the policy still acts, everywhere).

Episode seeds come from their own stream (``sim.fleet.episode_seed(..., "fleet", round)``).
The unit of lockstep stepping is a session: a wave, or the whole round when continuous. A
group commits each episode to its robot's store as it ends, and each finished session's
expert steps to its ledger (``.operators/group_G.json`` in the round's store), so a rerun
after a crash skips the sessions that are done with the budget they spent, and replays
(identically) the one that was cut, committing only the episodes that were not.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from collect.config import CollectConfig
from collect.engine import TASK_RETRIES, CollectionSummary, probe_task, run_robot_tasks
from collect.output import check_output
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
from train.fleet.labels import EXPERT, POLICY
from train.fleet.operators import Operator, ScriptedSupervisor, operator_groups, step_shares

DEPLOY_FEATURES = {
    "acted_by": {"dtype": "uint8", "shape": [1], "names": None},
    "labelled": {"dtype": "bool", "shape": [1], "names": None},
}
LEDGERS = ".operators"


@dataclass(frozen=True)
class Help:
    """How help is given in a round: the mode (a gate of ``GATES``, ``dagger`` or ``bc``), its thresholds,
    the expert steps each hand-over lasts at most, the operators' count, whether the robots deploy
    continuously or in waves, the steps after which a hand-over ends once the gate clears, and the hand-overs
    an episode gets at most."""

    mode: str
    gate: GateOptions
    segment_steps: int
    operators: int
    continuous: bool = False  # robots start their next episode at once, not with the rest of their group
    min_segment_steps: int | None = None  # hand back once the gate clears after this many steps (None: never)
    max_handovers: int | None = None  # per episode; past it the robot carries on alone (None: no limit)

    def __post_init__(self):
        if self.continuous and self.mode == "bc":
            raise ValueError("--continuous deploys for the gates and dagger; bc's demonstrations go wave by wave")
        if self.min_segment_steps is not None and not 1 <= self.min_segment_steps <= self.segment_steps:
            raise ValueError(f"--min-segment-steps must be in [1, --segment-steps ({self.segment_steps})]")
        if self.max_handovers is not None and self.max_handovers < 1:
            raise ValueError("--max-handovers must be at least 1")


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


def sessions(job: GroupJob) -> list[range]:
    """The group's episodes in lockstep sessions: one per wave, or all of them in one when continuous."""
    if job.help.continuous:
        return [range(job.episodes)]
    return [range(wave, wave + 1) for wave in range(job.episodes)]


def deploy_group(job: GroupJob, report_progress=None) -> list[RobotReport]:
    """Deploy the policy on one group's robots for every session not yet committed; their reports."""
    profiles = [RobotProfile.from_dict(profile) for profile in job.profiles]
    spec = resolve_task(job.task)
    envs = [spec.make_env(profile, cameras=job.cameras, image_size=job.image_size) for profile in profiles]
    features = {**features_of(envs[0]), **DEPLOY_FEATURES}
    policy, _ = load_policy(job.checkpoint)
    driver = FleetDriver(policy, measure=job.help.mode in MEASURES_DISAGREEMENT)
    supervisor = ScriptedSupervisor(spec, profiles)
    Path(job.ledger).parent.mkdir(parents=True, exist_ok=True)
    ledger = {int(session): steps for session, steps in _read_json(Path(job.ledger)).items()}
    operator = Operator(job.help_steps, job.help.segment_steps, job.help.min_segment_steps)
    steps = [0] * len(profiles)  # simulated by this run
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(ShardWriter(Path(path), {**job.attrs, "profile": profile}, features))
                   for path, profile in zip(job.stores, job.profiles)]
        done = [writer.done_indices() for writer in writers]

        def settle(robot: int, record: EpisodeRecord) -> None:
            steps[robot] += record.length
            if record.index not in done[robot]:
                writers[robot].commit([record], [])
                crash_point("deploy-commit")
            if report_progress is not None:
                report_progress(profiles[robot].robot_id, record.index + 1)

        for session, episodes in enumerate(sessions(job)):
            if session in ledger and all(set(episodes) <= settled for settled in done):
                operator.steps_left -= ledger[session]
                continue
            before = operator.steps_left
            run_session(job, session, episodes, envs, driver, supervisor, operator, features, settle)
            ledger[session] = before - operator.steps_left
            write_json_atomic(Path(job.ledger), {str(s): spent for s, spent in sorted(ledger.items())})
        reports = [RobotReport(profile.robot_id, profile.site, writer.num_episodes, 0, writer.num_frames, simulated, 0.0)
                   for profile, writer, simulated in zip(profiles, writers, steps)]
    for env in envs:
        env.close()
    return reports


def run_session(job: GroupJob, session: int, episodes: range, envs: list, driver: FleetDriver,
                supervisor: ScriptedSupervisor, operator: Operator, features: dict, settle) -> None:
    """``episodes`` of every robot of the group, stepped in lockstep, each robot running its episodes back to back
    (a robot whose episode ends starts its next one at the next step); ``settle(robot, record)`` takes each
    recorded episode as it ends. The session's decisions depend on nothing before it, so a rerun replays it."""
    robots, mode, step = len(envs), job.help.mode, 0
    upcoming = [list(episodes) for _ in range(robots)]
    episode, seeds = [0] * robots, [0] * robots
    observations, frames = [None] * robots, [[] for _ in range(robots)]
    active, success = np.zeros(robots, dtype=bool), np.zeros(robots, dtype=bool)
    handovers = np.zeros(robots, dtype=int)  # in each robot's current episode
    limit = job.help.max_handovers or np.inf
    tracker = ProgressTracker(robots, job.help.gate)
    draws = np.random.default_rng([job.fleet_seed, job.round, job.group, session])
    driver.reset()

    def begin(robot: int) -> None:
        """The robot's next episode, if it has one left."""
        if not upcoming[robot]:
            return
        episode[robot] = upcoming[robot].pop(0)
        seeds[robot] = episode_seed(job.fleet_seed, job.profiles[robot]["robot_id"], episode[robot], "fleet",
                                    job.round)
        observations[robot] = envs[robot].reset(seed=seeds[robot])[0]
        frames[robot], active[robot], success[robot], handovers[robot] = [], True, False, 0
        tracker.restart(robot)
        driver.restart(robot)
        if mode == "dagger":  # the labeller's style (speed, clearance) is drawn per episode, as a demonstration's
            supervisor.take_over(robot, seeds[robot])

    for robot in range(robots):
        begin(robot)
    while active.any():
        batch = {name: np.stack([o[name] for o in observations]) for name in driver.policy.spec.features}
        actions, disagreement = driver(batch)
        helped, started = None, False
        if mode == "bc":  # a whole demonstration by the wave's robot, while steps are left
            demonstrator = episode[0] % robots
            helped = demonstrator if operator.steps_left and active[demonstrator] else None
            started = step == 0 and helped is not None
        elif mode in GATES:
            draw = draws.random(robots)

            def priorities() -> np.ndarray:  # a robot whose episode has had its hand-overs asks no more after this one
                asked = GATES[mode](Signals(tracker.since_progress, tracker.regress, disagreement, draw), job.help.gate)
                return np.where((handovers < limit) | (np.arange(robots) == operator.helping), asked, 0.0)

            asked = priorities()
            returned = operator.hand_back(asked, active)
            if returned is not None:  # the policy gets a fresh start: a stall of the expert's time asks nothing
                tracker.restart(returned)
                asked = priorities()
            helped, started = operator.choose(asked, active)
        if started:
            supervisor.take_over(helped, seeds[helped] + step)
            handovers[helped] += 1
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
                settle(robot, EpisodeRecord(episode[robot], seeds[robot], bool(success[robot]),
                                            to_features(_stack(frames[robot]), features)))
                begin(robot)
        step += 1


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
    tasks, fleet, features, fps, _ = probe_task(config, actor)  # one task, whose features are all shared
    spec = tasks[0]  # one task: resolve_task above refuses a group
    described = open_checkpoint(checkpoint)
    if (trained := (described.task or {}).get("name")) != spec.name:
        raise ValueError(f"the policy in {checkpoint} was trained on {trained}, the fleet runs {spec.name}")
    if unseen := [name for name in described.spec.features if name not in features]:
        raise ValueError(f"the policy in {checkpoint} reads {unseen[0]}, which the fleet does not render here "
                         f"(it gives {', '.join(name for name in features if name.startswith('observation.'))})")
    features = {**features, **DEPLOY_FEATURES}
    out = Path(config.out)
    check_output(out, config, features, lineage)
    attrs = {"task": spec.name, "env_id": spec.env_id, "fps": fps, "code_version": code_version(),
             "data_config": config.data_config(), "lineage": lineage}
    groups = operator_groups([profile.robot_id for profile in fleet], help.operators)
    jobs = [GroupJob(group, tuple(str(out / store_name(robot)) for robot in robots),
                     tuple(fleet[robot].to_dict() for robot in robots), config.task, config.seed, round,
                     config.episodes, config.cameras, config.image_size, attrs, checkpoint, help, share,
                     str(out / LEDGERS / f"group_{group}.json"))
            for group, (robots, share) in enumerate(zip(groups, step_shares(help_steps, len(groups))))]
    targets = {profile.robot_id: config.episodes for profile in fleet}
    return run_robot_tasks(config, tasks, features, fps, fleet, targets,
                           lambda client: [client.submit(deploy_group_on_worker, job, retries=TASK_RETRIES,
                                                         pure=False) for job in jobs],
                           lineage=lineage, preload=("train.fleet.deploy",))
