import sim  # noqa: F401  (first: selects headless MuJoCo rendering before any test imports mujoco)

import pytest

from collect_helpers import collected


@pytest.fixture(scope="session")
def pick_place_fleet(tmp_path_factory):
    """3 robots (one per site) x 3 pick-place episodes, collected once for the dataset tests. Read-only."""
    return collected(tmp_path_factory, "pick_place", "--robots", "3", "--episodes", "3", "--task", "pick_place",
                     "--workers", "2")


@pytest.fixture(scope="session")
def camera_fleet(tmp_path_factory):
    """2 robots x 2 reach episodes with a 32x32 front camera. Read-only."""
    return collected(tmp_path_factory, "camera", "--robots", "2", "--episodes", "2", "--task", "reach",
                     "--cameras", "front", "--image-size", "32", "--workers", "2")
