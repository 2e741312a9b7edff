"""The collection config: a dataclass whose fields are the ``collect`` options."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from core.options import check_options
from sim.fleet import TEST_ROBOTS

# Fields that change how episodes are made: a rerun into the same OUT must match them.
# (robots and episodes may grow; workers, scheduler and output options may change freely.)
DATA_FIELDS = ("task", "seed", "cameras", "image_size", "keep_failures")


@dataclass
class CollectConfig:
    robots: int = field(default=10, metadata={"help": "fleet size: robots 0..N-1 of the fleet seed"})
    episodes: int = field(default=20, metadata={"help": "episodes attempted per robot"})
    task: str = field(default="pick_place", metadata={
        "help": "task name, env id or module:attr plug-in reference (with --repair: the plug-in reference the store "
                "names, which is imported only when given here)"})
    out: str = field(default="data/fleet", metadata={"help": "output directory, one zarr store per robot"})
    seed: int = field(default=0, metadata={"help": "fleet seed: fixes the robots and every episode seed"})
    cameras: tuple[str, ...] = field(default=(), metadata={"help": "cameras to record, e.g. front wrist"})
    image_size: int = field(default=96, metadata={"help": "camera image height and width"})
    keep_failures: bool = field(default=False, metadata={"help": "also store failed episodes (else only count them)"})
    workers: int = field(default=os.cpu_count() or 1, metadata={"help": "local worker processes"})
    scheduler: str | None = field(default=None, metadata={"help": "address of an existing dask scheduler"})
    overwrite: bool = field(default=False, metadata={"help": "replace an existing collection in OUT"})
    flush_frames: int = field(default=2048, metadata={"help": "frames a worker buffers before committing"})
    quiet: bool = field(default=False, metadata={"help": "no progress bar and no summary"})
    check_determinism: bool = field(default=True, metadata={
        "help": "first replay the first episode's reset and a few steps twice, and stop if they differ"})
    repair: str | None = field(default=None, metadata={
        "help": "a fleet store to verify and repair instead: its damaged robots are recollected from their seeds, "
                "with its own collection's options (of these, only --workers and --quiet apply)"})

    def __post_init__(self):
        check_options(self, ("robots", "episodes", "workers", "image_size", "flush_frames"),
                      lambda value: value >= 1, "must be at least 1")
        check_options(self, ("seed",), lambda value: value >= 0, "must not be negative")
        check_options(self, ("robots",), lambda value: value <= TEST_ROBOTS,
                      f"must be at most {TEST_ROBOTS:,}: robot ids from there on are the test split's held-out block")
        self.cameras = tuple(dict.fromkeys(self.cameras))  # once each: a rerun naming a camera twice matches

    def data_config(self) -> dict:
        """The fields that determine the data (stored in the manifest and every shard)."""
        values = asdict(self)
        return {name: list(values[name]) if name == "cameras" else values[name] for name in DATA_FIELDS}
