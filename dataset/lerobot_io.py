"""LeRobot interop: a fleet store to a LeRobotDataset v3.0 and back, through lerobot's own API.

``export_lerobot`` writes every committed episode with ``LeRobotDataset.create`` /
``add_frame`` / ``save_episode`` / ``finalize``. Of the observations it writes only what a
policy should read (``inputs``, as bc.py's ``--inputs``, by default ``proprio+cameras`` for a
store with cameras, else ``state``; or an explicit list, ``features``): lerobot-train feeds a
policy every feature it finds, so
the simulator's privileged ``observation.environment_state`` goes in only on request. Actions
and the ``next.*`` features always go. Each frame also carries two int64 (1,)
features, ``robot_id`` and ``site_id`` (an index into ``SITES``, -1 for an unknown
site), and its task as its LeRobot task string. LeRobot's names for Meta-World and its own
``task_index`` rename some features and tasks (``dataset/lerobot_names.py``): a Meta-World frame's
task is its task's instruction, its corner2 camera ``observation.image``. Images stay ``image`` features
(PNG inside the parquet files: lossless) unless ``use_videos`` makes them ``video``
(AV1 mp4: lossy). Bool features such as ``next.success`` are stored as bool, which
lerobot accepts. Beside lerobot's files, ``meta/robofleet.json`` (the sidecar, written
last) keeps what LeRobot has no place for: the store manifest, the renames, the inputs exported (the ``--inputs`` choice, or the ``features`` listed
joined by ``+``), the
exported features as stored in zarr, each shard's attrs (profile included) and each
episode's attempt index, seed and success. An export without some observation imports as a
store without it.

``import_lerobot`` reads any local LeRobotDataset v3.0 into a fleet store: one shard
per ``robot_id`` (a single robot_0000.zarr without that feature). With a sidecar the
store is rebuilt exactly; without one, episode seeds are -1, indices count within a
robot, success comes from ``next.success`` (else True) and profiles are
``{"robot_id", "site": "unknown"}``, which ``FleetStore.profile`` cannot turn into a
``RobotProfile`` (``FleetStore.site_of`` works).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path

import datasets
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.datasets.utils import DEFAULT_FEATURES
from lerobot.datasets.video_utils import decode_video_frames

from core.files import code_version, write_json_atomic
from core.progress import progress_bar
from dataset.fleet_store import FleetStore
from dataset.inputs import camera_names, observation_names, select_features, select_inputs
from dataset.lerobot_names import TASK_INDEX, lerobot_names, lerobot_tasks
from dataset.manifest import write_store_manifest
from dataset.shard import storage_dtype, store_name
from dataset.writer import EpisodeRecord, ShardWriter
from sim.fleet import SITES

SIDECAR = "meta/robofleet.json"
SIDECAR_VERSION = 1
ROBOT_TYPE = "robofleet_arm"
FLEET_FEATURES = {name: {"dtype": "int64", "shape": (1,), "names": None} for name in ("robot_id", "site_id")}
IMAGE_NAMES = ["height", "width", "channels"]
FLUSH_FRAMES = 2048  # frames an import buffers before committing (collect's default)


@contextmanager
def _scheduling_kept():
    """Give the calling thread its scheduling policy back on the way out.

    lerobot encodes videos with SVT-AV1, which, run as root, moves the thread that calls it to
    the real-time FIFO scheduler at priority 99. Left there, the process and every process it
    starts afterwards (torchrun ranks, dask workers) would run real-time and starve the rest
    of the machine.
    """
    if not hasattr(os, "sched_getscheduler"):  # not Linux: no such policies to keep
        yield
        return
    policy, parameters = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0)) != (policy, parameters):
            os.sched_setscheduler(0, policy, parameters)


@_scheduling_kept()
def export_lerobot(store: FleetStore, root: Path, repo_id: str | None = None, use_videos: bool = False,
                   progress: bool = True, inputs: str | None = None, features: list[str] | None = None) -> Path:
    """Write every committed episode of ``store`` into a new LeRobotDataset v3.0 at ``root``.

    ``inputs`` (a key of ``dataset.inputs.INPUTS``) picks the observations written, by default
    ``default_inputs(store.features)``; ``features`` lists them instead, by name. ``repo_id``
    defaults to ``robofleet/<store directory name>``; nothing is pushed to the hub. Returns
    ``root``. Refuses (ValueError) an existing ``root``, an empty store, both ``inputs`` and
    ``features``, inputs the store cannot feed, or a feature that is not one of its observations.
    """
    root = Path(root)
    if root.exists():
        raise ValueError(f"{root} already exists; export_lerobot writes a new LeRobotDataset")
    if store.num_episodes == 0:
        raise ValueError(f"{store.path} holds no committed episodes; nothing to export")
    inputs, observations = exported_observations(store.features, inputs, features, store.task_features)
    stored = exported_features(store.features, observations)
    manifest = store.manifest or {}
    task_block = manifest.get("task") or {"name": _shard_attr(store, "task")}
    tasks, names = lerobot_tasks(task_block), lerobot_names(task_block["name"], list(stored))
    fps = int(manifest.get("fps") or _shard_attr(store, "fps"))
    features = {names.get(name, name): {
                    "dtype": "video" if use_videos and feature["dtype"] == "image" else feature["dtype"],
                    "shape": tuple(feature["shape"]),  # lerobot compares shapes with tuples
                    "names": feature["names"]}
                for name, feature in stored.items()}
    # Built aside and renamed into place at the end: an interrupted export leaves no half dataset at root.
    building = root.with_name(f".{root.name}.exporting")
    if building.exists():
        shutil.rmtree(building)  # left by an export that died
    dataset = LeRobotDataset.create(repo_id or f"robofleet/{store.path.name}", fps, {**features, **FLEET_FEATURES},
                                    root=building, robot_type=ROBOT_TYPE, use_videos=use_videos)
    sidecar = {"version": SIDECAR_VERSION, "sites": list(SITES), "manifest": store.manifest, "inputs": inputs,
               "features": stored, "names": names, "robots": {}, "episodes": []}
    with _quiet_lerobot(), progress_bar(total=store.num_episodes, desc="export", unit="ep",
                                          disable=not progress) as bar:
        try:
            for robot in store.robots:
                attrs = {k: v for k, v in store.shards[robot].group.attrs.items()
                         if k not in ("features", "schema_version")}
                sidecar["robots"][str(robot)] = attrs
                site = attrs.get("profile", {}).get("site")
                fleet_columns = {"robot_id": np.array([robot]),
                                 "site_id": np.array([SITES.index(site) if site in SITES else -1])}
                for index in range(store.num_episodes_of(robot)):
                    episode, info = store.episode(robot, index), store.episode_info(robot, index)
                    task_of_frame = (episode[TASK_INDEX][:, 0] if TASK_INDEX in stored
                                     else np.zeros(info["length"], dtype=int))
                    for t in range(info["length"]):
                        dataset.add_frame({**{names.get(name, name): episode[name][t] for name in stored},
                                           **fleet_columns, "task": tasks[task_of_frame[t]]})
                    dataset.save_episode()
                    sidecar["episodes"].append({"robot_id": robot, **info})
                    bar.update()
        except BaseException:
            dataset.finalize()
            shutil.rmtree(building, ignore_errors=True)
            raise
    dataset.finalize()  # closes the parquet writers: without it the files have no footer
    remove_empty_folders(building / "images")
    write_json_atomic(building / SIDECAR, sidecar)
    building.rename(root)
    return root


def default_inputs(features: dict[str, dict]) -> str:
    """What an export holds unless told: a real robot's observations (``proprio+cameras``) where the
    store has cameras, else ``state``."""
    return "proprio+cameras" if camera_names(features) else "state"


def exported_observations(features: dict[str, dict], inputs: str | None = None, names: list[str] | None = None,
                          task_features: dict[str, dict] | None = None) -> tuple[str, list[str]]:
    """What an export of a store with ``features`` records as its inputs, and the observations it writes:
    ``inputs`` (by default ``default_inputs``) or the observations ``names`` lists (recorded joined by
    ``+``). Raises ValueError for both, or for inputs or names the store cannot feed (``task_features``: those
    a multi-task store's tasks record each in their own shape, ``dataset.inputs.select_inputs``)."""
    if inputs and names:
        raise ValueError("--inputs and --features are alternatives: give one of them")
    if names:
        selected = select_features(names, features)
        return "+".join(selected), selected
    inputs = inputs or default_inputs(features)
    return inputs, select_inputs(inputs, features, task_features)


def exported_features(features: dict[str, dict], observations: list[str]) -> dict[str, dict]:
    """The store's ``features`` an export writes: the ``observations`` chosen and every feature that is
    not an observation a policy reads (action, ``next.*``)."""
    left_out = set(observation_names(features)) - set(observations)
    return {name: feature for name, feature in features.items() if name not in left_out}


def remove_empty_folders(directory: Path) -> None:
    """Remove every empty folder under ``directory``, and ``directory`` too if it ends up empty.

    lerobot writes each image frame into images/<feature>/ before it embeds the frames in the
    parquet files, and leaves those folders behind empty.
    """
    for folder, _, _ in os.walk(directory, topdown=False):  # the deepest first: a parent may empty out
        if not any(Path(folder).iterdir()):
            Path(folder).rmdir()


def import_lerobot(root: Path, out: Path, repo_id: str | None = None, overwrite: bool = False,
                   progress: bool = True) -> Path:
    """Read the local LeRobotDataset v3.0 at ``root`` into a fleet store at ``out``; return ``out``.

    ``repo_id`` defaults to ``local/<root directory name>`` and is only a label: the data
    is read from ``root``, never downloaded. Refuses (ValueError) a non-empty ``out``
    unless ``overwrite``; FileNotFoundError when ``root`` holds no LeRobotDataset.
    """
    root, out = Path(root), Path(out)
    _check_local_dataset(root)
    if out.exists() and (out.is_file() or any(out.iterdir())):
        if not overwrite:
            raise ValueError(f"{out} exists and is not empty; choose another output or overwrite it")
        if out.resolve() == root.resolve():
            raise ValueError(f"{out} is the LeRobotDataset being imported; choose another output")
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    dataset = LeRobotDataset(repo_id or f"local/{root.name}", root=root, video_backend=_video_backend())
    frames = dataset.hf_dataset.with_format("numpy")
    spans = _episode_spans(_column(frames, "episode_index"), dataset.root)
    starts = [start for start, _ in spans.values()]
    has_robots = "robot_id" in dataset.features
    robots = _column(frames, "robot_id")[starts].astype(int).tolist() if has_robots else [0] * len(spans)
    robot_of_episode = dict(zip(spans, robots))
    sidecar = _read_sidecar(dataset, robots)
    features = sidecar["features"] if sidecar else _store_features(dataset.features)
    names = (sidecar or {}).get("names", {})  # ours -> LeRobot's (dataset/lerobot_names.py)
    read_as = {names.get(name, name): feature for name, feature in features.items()}
    back = {lerobot: ours for ours, lerobot in names.items()}
    sidecar_episodes = dict(zip(spans, sidecar["episodes"])) if sidecar else {}
    manifest = (sidecar or {}).get("manifest") or {}
    tasks = list(dataset.meta.tasks.index)
    task = manifest.get("task") or {"name": tasks[0] if len(tasks) == 1 else "; ".join(tasks), "env_id": None}
    out.mkdir(parents=True, exist_ok=True)
    with _quiet_lerobot(), progress_bar(total=len(spans), desc="import", unit="ep", disable=not progress) as bar:
        for robot in sorted(set(robots)):
            if sidecar:
                attrs = dict(sidecar["robots"][str(robot)])
            else:
                attrs = {"profile": {"robot_id": robot, "site": "unknown"}, "task": task["name"], "env_id": None,
                         "fps": dataset.fps}
            failed = attrs.pop("failed_episodes", [])
            with ShardWriter(out / store_name(robot), {**attrs, "code_version": code_version()}, features) as shard:
                pending, buffered = [], 0
                for order, episode in enumerate(e for e, r in robot_of_episode.items() if r == robot):
                    columns = _read_episode(dataset, frames, episode, spans[episode], read_as)
                    columns = {back.get(name, name): values for name, values in columns.items()}
                    pending.append(_episode_record(columns, order, sidecar_episodes.get(episode)))
                    buffered += pending[-1].length
                    if buffered >= FLUSH_FRAMES:  # bounded memory: commit in batches, as collect does
                        shard.commit(pending, [])
                        pending, buffered = [], 0
                    bar.update()
                shard.commit(pending, failed)
    write_store_manifest(out, task=task, fps=int(manifest.get("fps") or dataset.fps), features=features,
                         seed=manifest.get("seed"), data_config=manifest.get("data_config", {}),
                         collect_config=manifest.get("collect_config"),
                         imported_from={"lerobot_root": str(root.resolve()), "repo_id": dataset.repo_id})
    return out


def _check_local_dataset(root: Path) -> None:
    """Refuse what LeRobotDataset would try to download from the hub (missing files) or cannot read (not v3)."""
    info = root / "meta" / "info.json"
    if not info.is_file() or not any((root / "data").glob("**/*.parquet")):
        raise FileNotFoundError(f"no LeRobotDataset at {root} (needs meta/info.json and data/**/*.parquet)")
    version = json.loads(info.read_text()).get("codebase_version", "unknown")
    if not version.startswith("v3."):
        raise ValueError(f"{root} is a LeRobotDataset {version}; only v3.x can be imported (convert it with lerobot)")


def _column(frames: datasets.Dataset, name: str) -> np.ndarray:
    """A whole (1,)-shaped column of the frame table, flat."""
    return frames.select_columns([name])[:][name].reshape(-1)


def _episode_spans(episode_of_frame: np.ndarray, root: Path) -> dict[int, tuple[int, int]]:
    """Each episode's rows ``(start, stop)`` in the frame table; lerobot writes an episode's frames together."""
    episodes, starts, lengths = np.unique(episode_of_frame, return_index=True, return_counts=True)
    spans = {int(e): (int(start), int(start + n)) for e, start, n in zip(episodes, starts, lengths)}
    for episode, (start, stop) in spans.items():
        if (episode_of_frame[start:stop] != episode).any():
            raise ValueError(f"{root}: the frames of episode {episode} are not contiguous")
    return spans


def _episode_record(columns: dict[str, np.ndarray], order: int, info: dict | None) -> EpisodeRecord:
    """An episode for a shard, with its meta from the sidecar (``info``) or, for foreign data,
    its order within the robot as index, seed -1 and success from ``next.success`` (else True)."""
    if info is not None:
        return EpisodeRecord(info["index"], info["seed"], info["success"], columns)
    success = bool(columns["next.success"].any()) if "next.success" in columns else True
    return EpisodeRecord(order, -1, success, columns)


def _read_sidecar(dataset: LeRobotDataset, robots: list[int]) -> dict | None:
    """The export's sidecar, if there is one and it still describes the dataset's episodes."""
    path = dataset.root / SIDECAR
    if not path.is_file():
        return None
    sidecar = json.loads(path.read_text())
    exported = {sidecar.get("names", {}).get(name, name) for name in sidecar["features"]}
    if [e["robot_id"] for e in sidecar["episodes"]] != robots or not exported <= set(dataset.features):
        warnings.warn(f"{path} does not match the dataset's episodes and features (edited?); importing without it")
        return None
    return sidecar


def _shard_attr(store: FleetStore, key: str):
    """An attr of the first shard, for stores without a manifest."""
    return store.shards[store.robots[0]].group.attrs[key]


def _store_features(lerobot_features: dict[str, dict]) -> dict[str, dict]:
    """The fleet-store features of a foreign dataset: no bookkeeping, images as uint8 H x W x C."""
    features = {}
    for name, feature in lerobot_features.items():
        if name in DEFAULT_FEATURES or name in FLEET_FEATURES or feature["dtype"] == "string":
            continue
        if feature["dtype"] in ("image", "video"):
            features[name] = {"dtype": "image", "shape": list(_hwc_shape(feature)), "names": IMAGE_NAMES}
        else:
            features[name] = {"dtype": feature["dtype"], "shape": list(feature["shape"]), "names": feature.get("names")}
    return features


def _hwc_shape(feature: dict) -> tuple[int, int, int]:
    """An image feature's shape as height, width, channels (LeRobot allows C x H x W too)."""
    shape, names = tuple(feature["shape"]), list(feature.get("names") or [])
    if names[:1] == ["channels"] or (not names and shape[0] in (1, 3, 4) and shape[-1] not in (1, 3, 4)):
        return shape[1], shape[2], shape[0]
    return shape


def _read_episode(dataset: LeRobotDataset, frames: datasets.Dataset, episode: int, span: tuple[int, int],
                  features: dict[str, dict]) -> dict[str, np.ndarray]:
    """One LeRobot episode's stored features, cast and shaped for a shard."""
    start, stop = span
    video_keys = set(dataset.meta.video_keys) & set(features)
    stored = [name for name in features if name not in video_keys]
    columns = frames.select_columns(stored + ["timestamp"] if video_keys else stored)[start:stop]
    for key in video_keys:
        offset = dataset.meta.episodes[episode][f"videos/{key}/from_timestamp"]  # episodes share one mp4
        timestamps = (offset + columns["timestamp"].reshape(-1)).tolist()
        decoded = decode_video_frames(dataset.root / dataset.meta.get_video_file_path(episode, key), timestamps,
                                      dataset.tolerance_s, dataset.video_backend)  # float T x C x H x W in [0, 1]
        columns[key] = (decoded * 255).round().byte().permute(0, 2, 3, 1).numpy()
    return {name: np.asarray(columns[name]).astype(storage_dtype(feature), copy=False)
            .reshape(stop - start, *feature["shape"]) for name, feature in features.items()}


def _video_backend() -> str:
    """torchcodec when its FFmpeg libraries load, else pyav (lerobot only checks that torchcodec is installed)."""
    try:
        import torchcodec.decoders  # noqa: F401
    except (ImportError, RuntimeError, OSError):
        return "pyav"
    return "torchcodec"


@contextmanager
def _quiet_lerobot():
    """Hide datasets' per-episode "Map" bars and warnings about lerobot's internals that users cannot act on."""
    bars_were_on = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        with warnings.catch_warnings():
            # lerobot's stats histogram bool columns; datasets casts each (1,) value to a scalar;
            # torchvision's pyav decoder (used when torchcodec cannot load FFmpeg) is deprecated.
            warnings.filterwarnings("ignore", message="Converting input from bool", category=RuntimeWarning)
            warnings.filterwarnings("ignore", message="Conversion of an array with ndim > 0",
                                    category=DeprecationWarning)
            warnings.filterwarnings("ignore", message="The video decoding and encoding capabilities of torchvision")
            yield
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()
