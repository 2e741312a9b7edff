"""``FleetStore``: the read API of a collection directory (one zarr store per robot).

``FleetStore.open(path)`` takes a snapshot of what is committed at that moment, so a
store can be read while ``collect`` is still writing it: only complete episodes are
visible, and they stay the same for the life of the object.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

from dataset.chunks import decode_failure, read_rows
from dataset.manifest import MANIFEST, read_manifest, read_repair_journal, robot_task, task_features
from dataset.shard import Shard, committed_count
from sim.fleet import RobotProfile


class FleetStore:
    """Read-only view of every robot's committed episodes under one directory.

    ``repairing`` holds the robots an interrupted ``collect --repair`` has not finished
    (robot id -> its journal record, ``collect/repair.py``): until it has, their stores are not data.
    """

    def __init__(self, path: Path, manifest: dict | None, shards: dict[int, Shard],
                 repairing: dict[int, dict] | None = None):
        self.path, self.manifest, self.shards, self.repairing = path, manifest, shards, repairing or {}

    @classmethod
    def open(cls, path: str | Path) -> FleetStore:
        """A snapshot of the collection at ``path``: the directory of ``manifest.json`` and ``robot_NNNN.zarr``.

        Raises ``FileNotFoundError`` where ``path`` holds neither (a robot's own store included),
        and ``ValueError`` for a manifest that is not JSON or lacks its keys, a damaged repair
        journal, or a store zarr cannot open.
        """
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"no fleet store at {path}")
        if (path / "zarr.json").exists():  # a zarr store itself, most likely one robot's
            raise FileNotFoundError(f"{path} is a zarr store, not a fleet store: open the directory that holds "
                                    f"the robot_NNNN.zarr stores and manifest.json ({path.parent}?)")
        manifest = read_manifest(path)
        shards = {}
        for store_path in sorted(path.glob("robot_*.zarr")):
            robot_id = int(store_path.stem.split("_")[1])
            try:
                group = zarr.open_group(store_path, mode="r")
            except Exception as error:  # zarr raises plain errors (ValueError, JSONDecodeError...) on damage
                raise ValueError(f"{store_path}: not a readable zarr store ({error})") from None
            try:
                ends = group["meta/episode_ends"][:]
                shards[robot_id] = Shard(robot_id, store_path, group, ends[: committed_count(ends)])
            except Exception as error:  # a damaged chunk: its checksum or its decoding fails
                shards[robot_id] = Shard(robot_id, store_path, group, np.zeros(0, dtype=np.int64),
                                         unreadable=f"meta/episode_ends is damaged: {decode_failure(error)}")
        if manifest is None and not shards:
            raise FileNotFoundError(f"no fleet store at {path}: it has neither {MANIFEST} nor robot_NNNN.zarr stores")
        return cls(path, manifest, shards, read_repair_journal(path))

    # ----- what is in the store --------------------------------------------------------
    @property
    def robots(self) -> list[int]:
        return sorted(self.shards)

    @property
    def missing_robots(self) -> list[int]:
        """Robots the manifest lists whose store is not on disk (deleted since it was written)."""
        listed = (self.manifest or {}).get("robots", {})
        return sorted(int(robot_id) for robot_id in listed if int(robot_id) not in self.shards)

    @property
    def short_robots(self) -> list[int]:
        """Robots whose store shows fewer committed episodes than the manifest records.

        Committed episodes are never removed, so this is damage: ``episode_ends`` that cannot
        be read, or whose chunk was deleted (zarr reads it as zeros, which commit nothing).
        """
        listed = (self.manifest or {}).get("robots", {})
        return [robot_id for robot_id, shard in self.shards.items()
                if shard.num_episodes < listed.get(str(robot_id), {}).get("episodes", 0)]

    @property
    def foreign_robots(self) -> dict[int, str]:
        """Robots whose own store belongs to another collection than the manifest says (robot id -> what
        differs): another task, seed or data setting, as two collections written into one directory leave.

        This is damage: their episodes are not the collection the manifest describes.
        """
        if self.manifest is None:
            return {}
        data = self.manifest.get("data_config") or {}
        foreign = {}
        for robot_id, shard in self.shards.items():
            attrs, task = shard.group.attrs, robot_task(self.manifest, robot_id)
            own = {"task": attrs.get("task", task), **dict(attrs.get("data_config") or {})}
            for key, value in {"task": task, **data}.items():
                if key in own and own[key] != value:
                    foreign[robot_id] = f"its own {key} is {own[key]!r}, {MANIFEST}'s {value!r}"
                    break
        return foreign

    @property
    def num_episodes(self) -> int:
        return sum(shard.num_episodes for shard in self.shards.values())

    @property
    def num_frames(self) -> int:
        return sum(shard.num_frames for shard in self.shards.values())

    @property
    def features(self) -> dict[str, dict]:
        if self.manifest is not None:
            return self.manifest["features"]
        return dict(next(iter(self.shards.values())).group.attrs["features"]) if self.shards else {}

    @property
    def task_features(self) -> dict[str, dict]:
        """The features a multi-task store's tasks record each in their own shape, per task (absent from
        ``features``; ``dataset.manifest.task_features``)."""
        return task_features(self.manifest or {})

    def num_episodes_of(self, robot_id: int) -> int:
        return self._shard(robot_id).num_episodes

    def profile(self, robot_id: int) -> RobotProfile:
        return RobotProfile.from_dict(dict(self._shard(robot_id).group.attrs["profile"]))

    def site_of(self, robot_id: int) -> str:
        """The robot's site ("unknown" for data imported without a fleet profile)."""
        return dict(self._shard(robot_id).group.attrs.get("profile", {})).get("site", "unknown")

    def _shard(self, robot_id: int) -> Shard:
        if robot_id not in self.shards:
            raise KeyError(f"no robot {robot_id} in {self.path}; robots: {self.robots}")
        return self.shards[robot_id]

    # ----- reading episodes ----------------------------------------------------------------
    def episode(self, robot_id: int, index: int) -> dict[str, np.ndarray]:
        """Every feature of one committed episode, as arrays stacked in time."""
        shard = self._shard(robot_id)
        start, end = shard.bounds(index)
        return {name: read_rows(shard, f"data/{name}", start, end) for name in shard.group["data"].array_keys()}

    def episode_info(self, robot_id: int, index: int) -> dict:
        """Seed, success, attempt index and length of one committed episode."""
        shard = self._shard(robot_id)
        shard.bounds(index)  # range check
        meta = shard.group["meta"]
        return {
            "seed": int(meta["episode_seed"][index]),
            "success": bool(meta["episode_success"][index]),
            "index": int(meta["episode_index"][index]),
            "length": int(meta["episode_length"][index]),
        }
