"""What a policy reads: the ``--inputs`` choices, shared by training, evaluation and the LeRobot export.

``state`` is ``observation.state`` plus the simulator's privileged ``observation.environment_state``
(object poses and the goal); ``proprio+cameras`` is what a real robot has, its own
``observation.state`` and every camera; ``cameras`` is the images alone; ``state+cameras`` is
everything, a privileged upper bound for the image policies. ``select_features`` checks an
explicit list of observation names instead (the LeRobot export's ``--features``).
"""

from __future__ import annotations

PROPRIO_FEATURE = "observation.state"
PRIVILEGED_FEATURE = "observation.environment_state"
STATE_FEATURES = (PROPRIO_FEATURE, PRIVILEGED_FEATURE)
IMAGE_PREFIX = "observation.images."
TASK_FEATURE = "task_index"  # a multi-task store's per-frame task: an index into its manifest's task list
INPUTS = {  # --inputs -> (vector features it takes, whether it takes the cameras)
    "state": (STATE_FEATURES, False),
    "proprio+cameras": ((PROPRIO_FEATURE,), True),
    "cameras": ((), True),
    "state+cameras": (STATE_FEATURES, True),
}


def is_image(name: str) -> bool:
    """Whether the feature ``name`` is a camera."""
    return name.startswith(IMAGE_PREFIX)


def camera_names(features: dict[str, dict]) -> list[str]:
    """The camera features of a store's (or a LeRobotDataset's) ``features``."""
    return [name for name, feature in features.items() if is_image(name) and feature["dtype"] in ("image", "video")]


def observation_names(features: dict[str, dict]) -> list[str]:
    """The observations a policy can read among a store's ``features``: the state vectors it has, then cameras."""
    return [name for name in STATE_FEATURES if name in features] + camera_names(features)


def select_features(names: list[str] | tuple[str, ...], features: dict[str, dict]) -> list[str]:
    """The observations ``names`` lists (each once, in its order), checked against a store's ``features``.

    Raises ValueError for an empty list or a name that is not one of the store's observations.
    """
    available = observation_names(features)
    if not names:
        raise ValueError(f"--features needs at least one observation; the store has {', '.join(available)}")
    unknown = [name for name in names if name not in available]
    if unknown:
        raise ValueError(f"unknown feature {unknown[0]!r} for --features; the store's observations are "
                         f"{', '.join(available)}")
    return list(dict.fromkeys(names))


def select_inputs(inputs: str, features: dict[str, dict], task_features: dict[str, dict] | None = None) -> list[str]:
    """The features ``inputs`` (a key of ``INPUTS``) takes from a store with ``features``: vectors, then cameras.

    ``state`` takes whichever of ``STATE_FEATURES`` the store has (plug-in tasks may have only
    ``observation.state``); the other choices need every feature they name. ``task_features`` are a
    multi-task store's features that its tasks record each in their own shape (task -> features,
    ``dataset.manifest.task_features``): one policy cannot read them, so inputs that take one are refused.
    Raises ValueError, naming the fix, for inputs the store cannot feed.
    """
    if inputs not in INPUTS:
        raise ValueError(f"unknown inputs {inputs!r}; choose from {', '.join(INPUTS)}")
    vectors, takes_cameras = INPUTS[inputs]
    for name in vectors:
        if shapes := [f"{task} {own[name]['shape']}" for task, own in (task_features or {}).items() if name in own]:
            raise ValueError(f"--inputs {inputs} reads {name}, which this store's tasks record in different shapes "
                             f"({', '.join(shapes)}): one policy of them reads --inputs proprio+cameras")
    cameras = camera_names(features)
    if takes_cameras and not cameras:
        raise ValueError(f"--inputs {inputs} needs camera images and the store has none "
                         "(collect with --cameras front wrist)")
    missing = [name for name in vectors if name not in features]
    if missing and inputs != "state":
        raise ValueError(f"--inputs {inputs} needs {missing[0]}, which the store does not have")
    selected = [name for name in vectors if name in features] + (cameras if takes_cameras else [])
    if not selected:
        raise ValueError(f"--inputs {inputs} finds none of {', '.join(vectors)} in the store")
    return selected
