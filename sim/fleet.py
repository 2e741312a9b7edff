"""The simulated fleet: deterministic, JSON-serialisable robot profiles.

A fleet is non-IID by construction. Every robot belongs to a *site*, and each site
draws its robots' physical and visual parameters from a clearly different
distribution (the office / warehouse / factory fleet of the source material):

| site      | objects                       | table surface            | goal tolerance | sensor noise |
|-----------|-------------------------------|--------------------------|----------------|--------------|
| office    | small, light (4-5 cm, ~0.1 kg) | clean, high friction     | 4 cm           | low          |
| warehouse | large, heavy (6-7 cm, ~0.5 kg) | dirty, low friction      | 5 cm           | high         |
| factory   | precise parts (3-3.5 cm, light) | clean, medium friction  | 2.5 cm         | very low     |

On top of the site, every robot varies in table height, object size, mass and
friction, actuator gains, sensor noise, camera pose and colours.

Robot ``k`` of fleet seed ``s`` is the same robot in every command: its parameters
are drawn from a generator seeded by ``(s, k)`` alone, never by the fleet size.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Sequence, TypeVar

import numpy as np

SITES = ("office", "warehouse", "factory")
T = TypeVar("T")

# Per-site sampling ranges, (low, high) for uniform draws.
SITE_DISTRIBUTIONS: dict[str, dict[str, tuple[float, float]]] = {
    "office": {
        "object_half_size": (0.020, 0.025),
        "object_mass": (0.05, 0.15),
        "object_friction": (0.9, 1.2),
        "table_friction": (0.8, 1.1),
        "goal_tolerance": (0.04, 0.04),
        "sensor_noise": (0.0005, 0.0015),
    },
    "warehouse": {
        "object_half_size": (0.030, 0.035),
        "object_mass": (0.35, 0.7),
        "object_friction": (0.7, 0.9),
        "table_friction": (0.25, 0.45),
        "goal_tolerance": (0.05, 0.05),
        "sensor_noise": (0.002, 0.004),
    },
    "factory": {
        "object_half_size": (0.015, 0.018),
        "object_mass": (0.02, 0.06),
        "object_friction": (0.9, 1.1),
        "table_friction": (0.6, 0.8),
        "goal_tolerance": (0.025, 0.025),
        "sensor_noise": (0.0002, 0.0006),
    },
}

# Ranges shared by every site: the per-robot variation that is not site-specific.
ROBOT_VARIATION: dict[str, tuple[float, float]] = {
    "table_height": (-0.04, 0.04),
    "actuator_gain_scale": (0.8, 1.25),
}

SITE_COLOURS = {
    "office": ((0.80, 0.75, 0.65), (0.85, 0.2, 0.2)),  # light wood table, red cube
    "warehouse": ((0.45, 0.42, 0.38), (0.75, 0.55, 0.3)),  # grimy table, cardboard box
    "factory": ((0.55, 0.6, 0.65), (0.2, 0.4, 0.85)),  # steel table, blue part
}


@dataclass(frozen=True)
class RobotProfile:
    """Everything that makes one robot of the fleet different from another.

    Plain data: ``to_dict``/``from_dict`` round-trip it through JSON. Together with
    an episode seed it fully determines an environment.
    """

    robot_id: int
    site: str
    table_height: float  # table top, metres relative to the arm's base
    table_friction: float  # sliding friction of the table top
    object_half_size: float  # half edge of the manipulated cube, metres
    object_mass: float  # kg
    object_friction: float
    actuator_gain_scale: float  # multiplies every joint's position gain
    sensor_noise: float  # std of Gaussian noise on positions in observations, metres
    goal_tolerance: float  # success radius, metres
    camera_offset: tuple[float, float, float]  # front camera displacement, metres
    table_rgba: tuple[float, float, float, float]
    object_rgba: tuple[float, float, float, float]
    light_intensity: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> RobotProfile:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown robot profile fields: {sorted(unknown)}")
        tuples = {k: tuple(v) for k, v in data.items() if isinstance(v, list)}
        return cls(**{**data, **tuples})


def make_robot(robot_id: int, seed: int = 0, site: str | None = None) -> RobotProfile:
    """Robot ``robot_id`` of the fleet with seed ``seed`` (sites assigned round-robin)."""
    if robot_id < 0:
        raise ValueError(f"robot_id must be >= 0, got {robot_id}")
    site = site or SITES[robot_id % len(SITES)]
    if site not in SITE_DISTRIBUTIONS:
        raise ValueError(f"unknown site {site!r}; choose from {', '.join(SITES)}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, robot_id]))

    def draw(low_high: tuple[float, float]) -> float:
        return round(float(rng.uniform(*low_high)), 6)

    site_ranges = SITE_DISTRIBUTIONS[site]
    table_rgb, object_rgb = SITE_COLOURS[site]
    jitter = rng.uniform(-0.08, 0.08, size=6)
    return RobotProfile(
        robot_id=robot_id,
        site=site,
        table_height=draw(ROBOT_VARIATION["table_height"]),
        table_friction=draw(site_ranges["table_friction"]),
        object_half_size=draw(site_ranges["object_half_size"]),
        object_mass=draw(site_ranges["object_mass"]),
        object_friction=draw(site_ranges["object_friction"]),
        actuator_gain_scale=draw(ROBOT_VARIATION["actuator_gain_scale"]),
        sensor_noise=draw(site_ranges["sensor_noise"]),
        goal_tolerance=draw(site_ranges["goal_tolerance"]),
        camera_offset=tuple(round(float(v), 4) for v in rng.uniform(-0.06, 0.06, size=3)),
        table_rgba=(*[round(float(np.clip(c + j, 0, 1)), 3) for c, j in zip(table_rgb, jitter[:3])], 1.0),
        object_rgba=(*[round(float(np.clip(c + j, 0, 1)), 3) for c, j in zip(object_rgb, jitter[3:])], 1.0),
        light_intensity=draw((0.55, 0.9)),
    )


def make_fleet(n_robots: int, seed: int = 0) -> list[RobotProfile]:
    """The first ``n_robots`` robots of the fleet with seed ``seed``."""
    if n_robots < 1:
        raise ValueError(f"a fleet needs at least 1 robot, got {n_robots}")
    return [make_robot(k, seed) for k in range(n_robots)]


def default_profile() -> RobotProfile:
    """Robot 0 of fleet seed 0: used when an env is made without a profile."""
    return make_robot(0, 0)


SEED_STREAMS = {"collect": 0, "evaluate": 1, "demo": 2, "dagger": 3, "fleet": 4, "test": 5}
# Robot ids from here on are the test split's held-out block (eval/split.py): no collection, rollout or dev
# evaluation uses them.
TEST_ROBOTS = 1_000_000


def episode_seed(fleet_seed: int, robot_id: int, episode: int, stream: str = "collect", round: int = 0) -> int:
    """The reset seed of one episode: a pure function of fleet seed, robot, index and purpose.

    Different streams (collection, evaluation, the demo, DAgger's rollouts) never share
    seeds by accident, so evaluation runs on episodes the policy was not trained on.
    ``round`` numbers repeated collections of one stream (DAgger's rounds, from 1).
    """
    entropy = [fleet_seed, robot_id, episode, SEED_STREAMS[stream], *([round] if round else [])]
    sequence = np.random.SeedSequence(entropy)
    return int(sequence.generate_state(1, dtype=np.uint32)[0])


def fleet_task(tasks: Sequence[T], robot_id: int) -> T:
    """The task robot ``robot_id`` runs when a fleet shares ``tasks`` out: robot k runs task k mod n, so each block
    of n robots (0..n-1, n..2n-1, ...) runs every task once. Robots take the sites in turn, so a task meets every
    site as the fleet grows; where n is a multiple of the number of sites it would not, and each block is shifted
    by one task more than the last."""
    shift = robot_id // len(tasks) if len(tasks) % len(SITES) == 0 else 0
    return tasks[(robot_id + shift) % len(tasks)]
