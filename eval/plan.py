"""What an evaluation runs, settled before anything runs or is written.

``make_plan(config)`` loads the checkpoint and checks it against the task and its env
(the task it was trained on, the observation and action schema), picks the robots and
gives each one its held-out episode seeds. Every problem is a ``ValueError`` with a
one-line message, raised before a worker starts or a file is written.

**Many tasks.** A checkpoint whose task block lists ``"tasks"`` (a multi-task policy) or the expert
alone on a group (``--task metaworld/mt10``) is evaluated on every task: robot k runs the task
``sim.fleet.fleet_task`` gives it, as in collection, and ``--episodes`` counts per task
(``eval.tasks.share_episodes``).

**Held-out seeds.** Episode ``i`` of robot ``r`` runs with the seed of its split
(``eval.split.split_seed``: the ``evaluate`` stream for dev, the ``test`` stream for test),
i from ``--episode-offset`` (0); collection uses the ``collect`` stream, so the seeds
differ by construction. When the training collection is still on
disk (the checkpoint records its path), the seeds are also checked against the seeds it
actually holds (``meta/episode_seed``), and one that was trained on is skipped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from core.errors import one_line, warn
from core.files import file_sha256, from_repo, repo_relative
from dataset import FleetStore
from dataset.chunks import DataError, read_rows
from dataset.manifest import MANIFEST
from dataset.inputs import IMAGE_PREFIX, PRIVILEGED_FEATURE, camera_names
from dataset.schema import TASK_FEATURES, features_of
from eval.config import EvalConfig
from eval.lerobot_policy import LeRobotAgent, describe_lerobot_policy, is_lerobot_pretrained
from eval.split import check_robots, describe, split_seed
from eval.tasks import share_episodes
from sim.fleet import RobotProfile, make_robot
from sim.tasks import METAWORLD_TASKS, TaskSpec, is_group, recorded_task, resolve_task, resolve_tasks
from train.checkpoint import Checkpoint, open_checkpoint
from train.policies.policy import PolicySpec

PINNED_CHECKPOINT = ".checkpoint"  # in the staging folder: the workers' copy, removed before the output is published


@dataclass
class EvalPlan:
    task: str  # what workers hand to resolve_task (a name, env id or module:attr)
    task_name: str
    checkpoint: str | None  # the checkpoint file (resolved, so a moving `last` cannot change it mid-run)
    checkpoint_info: dict | None
    cameras: tuple[str, ...]
    image_size: int | tuple[int, int]
    fps: int
    fleet_seed: int
    seeds_from: str  # where the fleet seed came from
    robots: list[RobotProfile]
    seeds: dict[int, list[int]]  # robot id -> its episodes' seeds
    training_robots: list[int] | None  # robots it trained on (collection and rounds), when they are on disk
    held_out: str  # how the seeds are known to be held out
    robot_tasks: dict[int, str] = dataclasses.field(default_factory=dict)  # robot id -> its task (workers resolve it)
    tasks: list[str] | None = None  # many tasks: their names, in the order of the policy's task_index
    positions: str | None = None  # --positions, for Meta-World's envs
    split: str = "dev"
    store_manifest_sha256: str | None = None  # of the training collection's manifest.json, where it is on disk
    loaded: Checkpoint | None = None  # the checkpoint as read and verified, which the workers' copy is made of

    def to_dict(self) -> dict:
        """The resolved facts recorded in eval_info.json."""
        return {"task": self.task_name, "cameras": list(self.cameras), "image_size": self.image_size,
                "fps": self.fps, "fleet_seed": self.fleet_seed, "fleet_seed_from": self.seeds_from,
                "split": self.split, "held_out": self.held_out, "positions": self.positions or "random",
                **({"tasks": self.tasks} if self.tasks else {}),
                "store_manifest_sha256": self.store_manifest_sha256,
                "robot_ids": [p.robot_id for p in self.robots], "training_robots": self.training_robots,
                "unseen_robots": None if self.training_robots is None else
                [p.robot_id for p in self.robots if p.robot_id not in set(self.training_robots)]}


def pin_checkpoint(plan: EvalPlan, directory: Path) -> EvalPlan:
    """The plan with its checkpoint written, as read and verified, into ``directory`` (the run's staging
    folder), for the workers to load: a training run pruning its old checkpoints cannot pull the one being
    evaluated away. A LeRobot policy stays where it is (no RoboFleet run prunes it)."""
    if plan.loaded is None or plan.loaded.format != "robofleet":
        return plan
    return dataclasses.replace(plan, checkpoint=str(plan.loaded.write(directory / PINNED_CHECKPOINT)))


def _load(path: str, n_action_steps: int | None = None, max_parameters: int | None = None) -> Checkpoint:
    """The checkpoint at ``path``, read once and checked to build its policy; a one-line ``ValueError``
    for a missing, old-format, damaged or incomplete one. A run directory gives its newest intact
    checkpoint, with a warning for each broken one skipped. A LeRobot pretrained_model directory
    is described as a checkpoint once lerobot has loaded it."""
    given = Path(path)
    if is_lerobot_pretrained(given):
        checkpoint = describe_lerobot_policy(given.resolve())
        _check_chunk(checkpoint.spec, n_action_steps)
        try:
            LeRobotAgent(checkpoint.path, "cpu", n_action_steps)
        except Exception as error:  # weights or processors that lerobot cannot load
            raise ValueError(f"LeRobot policy {checkpoint.path} does not load: {one_line(error)}") from None
        return checkpoint
    checkpoint = open_checkpoint(given)
    _check_chunk(checkpoint.spec, n_action_steps)
    try:
        checkpoint.policy(n_action_steps=n_action_steps, max_parameters=max_parameters)
    except ValueError:  # already one line that names the checkpoint: too large, or weights that do not fit
        raise
    except Exception as error:  # an unknown policy kind, options its class refuses
        raise ValueError(f"checkpoint {checkpoint.path} does not build its policy: {one_line(error)}") from None
    return checkpoint


def _check_chunk(spec: PolicySpec, n_action_steps: int | None) -> None:
    longest = spec.horizon + spec.action_start
    if n_action_steps is not None and n_action_steps > longest:
        raise ValueError(f"--n-action-steps {n_action_steps} is longer than the {spec.kind} policy's chunk "
                         f"of {longest} actions")


def _task(config: EvalConfig, checkpoint: Checkpoint | None) -> tuple[str, str, list[TaskSpec], bool]:
    """What workers resolve, the task's name, the tasks evaluated (a multi-task policy's in its checkpoint's order,
    the order its ``task_index`` counts in) and whether there are many (``eval.tasks``)."""
    trained_on = (checkpoint.task if checkpoint else None) or {}
    if trained_on.get("tasks"):
        if config.task not in (None, trained_on.get("name")):
            raise ValueError(f"the checkpoint was trained on the tasks of {trained_on.get('name')!r}, "
                             f"not {config.task!r}")
        where = f"the checkpoint {checkpoint.path}"
        return (trained_on.get("name"), trained_on.get("name"),
                [recorded_task(name, None, where) for name in trained_on["tasks"]], True)
    if checkpoint is None and is_group(config.task):  # the expert alone on a group
        return config.task, config.task, resolve_tasks(config.task), True
    reference = config.task or trained_on.get("reference") or trained_on.get("name")
    if reference is None:
        lerobot = checkpoint is not None and checkpoint.format == "lerobot"
        where = ("the LeRobot policy does not name its task (it was not trained on a `dataset export-lerobot` export)"
                 if lerobot else "the checkpoint does not name its task")
        raise ValueError(f"{where}: give --task")
    if config.task:
        spec = resolve_task(config.task)
    else:
        spec = recorded_task(reference, None, f"the checkpoint {checkpoint.path}")
    if checkpoint is not None and trained_on.get("name") not in (None, spec.name):
        raise ValueError(f"the checkpoint was trained on task {trained_on['name']!r}, not {spec.name!r}")
    return reference, spec.name, [spec], False


def _check_positions(positions: str | None, specs: list[TaskSpec]) -> None:
    """``--positions`` is for tasks whose envs take it: Meta-World's."""
    if positions is not None and (other := next((s.name for s in specs if s.name not in METAWORLD_TASKS), None)):
        raise ValueError(f"--positions {positions}: task {other} takes no positions (only Meta-World tasks, "
                         "metaworld/..., have fixed and random ones)")


def _cameras(checkpoint: Checkpoint | None) -> tuple[tuple[str, ...], int | tuple[int, int]]:
    """The cameras and image size the policy's image inputs need (none for state policies)."""
    if checkpoint is None:
        return (), 96
    names = [name for name in checkpoint.spec.features if name.startswith(IMAGE_PREFIX)]
    if not names:
        return (), 96
    height, width = checkpoint.features[names[0]]["shape"][:2]
    return tuple(name[len(IMAGE_PREFIX):] for name in names), height if height == width else (height, width)


def _probe(spec: TaskSpec, profile: RobotProfile, cameras: tuple[str, ...], image_size: int | tuple[int, int],
           env_kwargs: dict) -> tuple[dict, int]:
    """The features and fps of ``spec``'s env for one robot; a one-line ``ValueError`` where it cannot be made."""
    try:
        probe = spec.make_env(profile, cameras=cameras, image_size=image_size, **env_kwargs)
    except Exception as error:
        named = ", ".join(IMAGE_PREFIX + camera for camera in cameras)
        wanted = f" with the policy's cameras ({named})" if cameras else ""
        raise ValueError(f"cannot make the {spec.name} env{wanted}: {one_line(error)}") from None
    try:
        return features_of(probe), int(probe.metadata.get("render_fps", 0))
    finally:
        probe.close()


def _check_schema(checkpoint: Checkpoint, env_features: dict) -> None:
    """Every input of the policy and the action must have the shape the policy was trained on."""
    trained = checkpoint.features
    for name in [*checkpoint.spec.features, "action"]:
        if name not in env_features:
            raise ValueError(f"schema mismatch: the policy needs {name}, which the env does not provide")
        if name not in trained or list(trained[name]["shape"]) != list(env_features[name]["shape"]):
            found = trained.get(name, {}).get("shape")
            raise ValueError(f"schema mismatch: the checkpoint's {name} has shape {found}, "
                             f"the env's {env_features[name]['shape']}")


def _training_store(checkpoint: Checkpoint | None) -> FleetStore | None:
    """The collection the checkpoint was trained on, where it is still on disk.

    A ``ValueError`` (a corrupt manifest, a store zarr cannot open, robot stores under repair)
    stops the evaluation: its held-out seeds could not be checked against it.
    """
    data = checkpoint.data if checkpoint else None
    if not data:
        return None
    try:
        store = FleetStore.open(from_repo(data))
    except OSError:  # moved or deleted: the seeds are held out by their stream alone
        return None
    if store.repairing:
        raise ValueError(f"the training collection {store.path} has robot stores under repair (an interrupted "
                         f"`collect --repair`): run `collect --repair {store.path}`, then evaluate")
    return store


def training_robots(checkpoint: Checkpoint, store: FleetStore, fleet_seed: int) -> list[int]:
    """The robots of the training collection ``store`` and of the stores the checkpoint also trained on (fleet
    learning's rounds) that are on disk and of the same fleet."""
    robots = set(store.robots)
    for path in checkpoint.more_data:
        try:
            more = FleetStore.open(from_repo(path))
        except (OSError, ValueError):  # moved, deleted or unreadable: its robots go uncounted
            continue
        if more.manifest is not None and more.manifest.get("seed") == fleet_seed:
            robots.update(more.robots)
    return sorted(robots)


def trained_seeds(store: FleetStore, robot_id: int) -> set[int]:
    """The episode seeds of one robot's committed training episodes; damage there is a ``DataError``."""
    shard = store.shards.get(robot_id)
    if shard is not None and shard.unreadable:
        raise DataError(f"the training collection's {shard.path.name}: {shard.unreadable}; "
                        f"run `collect --repair {store.path}`")
    if shard is None or not shard.num_episodes:
        return set()
    return set(read_rows(shard, "meta/episode_seed", 0, shard.num_episodes).tolist())


def _fleet_seed(config: EvalConfig, checkpoint: Checkpoint | None, store: FleetStore | None) -> tuple[int, str]:
    """The fleet seed and where it came from: ``--seed``, the training collection's manifest, the
    checkpoint's record of it (ours record it from that manifest; a LeRobot export's sidecar), or 0
    for the expert alone. A policy whose collection's seed is unknown is a ``ValueError``: a guess
    would put other robots and seeds under its name."""
    if config.seed is not None:
        return config.seed, "--seed"
    if store is not None and (store.manifest or {}).get("seed") is not None:
        return int(store.manifest["seed"]), f"the training collection {repo_relative(store.path)}"
    if checkpoint is None:
        return 0, "the default (0), for the expert alone"
    if checkpoint.fleet_seed is not None:
        return int(checkpoint.fleet_seed), ("the LeRobot policy's training export (meta/robofleet.json)"
                                            if checkpoint.format == "lerobot" else "the checkpoint's record of "
                                            "its training collection")
    data = checkpoint.data
    if not data:
        why = "the checkpoint does not record its training collection"
    elif store is None:
        why = f"its training collection {data} is not on disk"
    else:
        why = f"the manifest of its training collection {data} records no seed"
    raise ValueError(f"the fleet seed is unknown ({why}): give --seed, the fleet seed the collection was made with")


def held_out_seeds(fleet_seed: int, robot_id: int, episodes: int, exclude: set[int] = frozenset(),
                   first: int = 0, split: str = "dev") -> list[int]:
    """``episodes`` seeds of ``split`` for one robot from index ``first`` on, skipping any in ``exclude``."""
    seeds, index = [], first
    while len(seeds) < episodes:
        seed = split_seed(split, fleet_seed, robot_id, index)
        if seed not in exclude:
            seeds.append(seed)
        index += 1
    return seeds


def make_plan(config: EvalConfig) -> EvalPlan:
    """Check the checkpoint against the task and env, and settle robots and seeds (see the module docstring)."""
    if config.device == "cuda" and config.scheduler is None and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch finds no CUDA GPU on this machine; use --device cpu (or auto)")
    check_robots(config.split, config.robot_offset, config.robots)
    checkpoint = _load(config.checkpoint, config.n_action_steps, config.max_parameters) if config.checkpoint else None
    task, name, specs, many = _task(config, checkpoint)
    _check_positions(config.positions, specs)
    env_kwargs = {"positions": config.positions} if config.positions else {}
    cameras, image_size = _cameras(checkpoint)
    store = _training_store(checkpoint)
    fleet_seed, seeds_from = _fleet_seed(config, checkpoint, store)
    robot_ids = list(range(config.robot_offset, config.robot_offset + config.robots))
    shares = (share_episodes([spec.name for spec in specs], robot_ids, config.episodes) if many
              else {robot_id: (task, config.episodes) for robot_id in robot_ids})
    robots = [make_robot(k, fleet_seed) for k in robot_ids]

    # The first robot of each task makes its env once: every task must give the inputs the policy was trained on.
    probes = [(spec, next(p for p in robots if shares[p.robot_id][0] == spec.name)) for spec in specs] if many \
        else [(specs[0], robots[0])]
    for spec, profile in probes:
        features, fps = _probe(spec, profile, cameras, image_size, env_kwargs)
        if checkpoint is not None:
            _check_schema(checkpoint, {**features, **(TASK_FEATURES if many else {})})

    if checkpoint is not None and PRIVILEGED_FEATURE in checkpoint.spec.features and (
            cameras or (store is not None and camera_names(store.features))):
        warn(f"the policy reads {PRIVILEGED_FEATURE} (the simulator's object poses and goal) where cameras are "
             "available: a real robot could not run it (train on --inputs proprio+cameras)")

    same_fleet = store is not None and store.manifest is not None and store.manifest.get("seed") == fleet_seed
    seeds = {p.robot_id: held_out_seeds(fleet_seed, p.robot_id, shares[p.robot_id][1],
                                        trained_seeds(store, p.robot_id) if same_fleet else set(),
                                        first=config.episode_offset, split=config.split)
             for p in robots}
    held_out = describe(config.split) + (", checked against the training collection's seeds" if same_fleet
                                         else " (disjoint from the collect stream)")
    if config.episode_offset:
        held_out += f", episodes from {config.episode_offset} on"
    info = None
    if checkpoint is not None:
        info = {"path": repo_relative(checkpoint.path), "sha256": checkpoint.weights_sha256,
                "format": checkpoint.format, "step": checkpoint.step,
                "code_version": checkpoint.code_version, "task": checkpoint.task, "policy": checkpoint.spec.kind,
                "inputs": checkpoint.spec.inputs, "features": list(checkpoint.spec.features), "data": checkpoint.data,
                "n_action_steps": config.n_action_steps or checkpoint.spec.n_action_steps,
                "personal_robots": sorted(checkpoint.personal)}
    return EvalPlan(task=task, task_name=name, checkpoint=str(checkpoint.path) if checkpoint else None,
                    checkpoint_info=info,
                    cameras=cameras, image_size=image_size, fps=fps, fleet_seed=fleet_seed, seeds_from=seeds_from,
                    robots=robots, seeds=seeds,
                    training_robots=training_robots(checkpoint, store, fleet_seed) if same_fleet else None,
                    held_out=held_out, split=config.split, loaded=checkpoint,
                    robot_tasks={robot_id: share[0] for robot_id, share in shares.items()},
                    tasks=[spec.name for spec in specs] if many else None, positions=config.positions,
                    store_manifest_sha256=file_sha256(store.path / MANIFEST) if store is not None else None)
