import sim  # noqa: F401  (first: selects headless MuJoCo rendering before any test imports mujoco)

import shutil
import sys

import pytest

from collect_helpers import collected
from dask_cluster import dask_cluster
from train_helpers import train


def pytest_collection_modifyitems(items):
    """Skip the tests marked ``gpu`` where torch finds no CUDA device (torch is imported only if there are some)."""
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    import torch

    if not torch.cuda.is_available():
        for item in gpu_tests:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture
def planted_module(tmp_path, monkeypatch):
    """A module ``planted`` on the path whose import writes a marker file (the marker's path is returned)."""
    marker = tmp_path / "imported"
    (tmp_path / "planted.py").write_text(f"open({str(marker)!r}, 'w').close()\nTASK = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield marker
    sys.modules.pop("planted", None)


@pytest.fixture(scope="session")
def pick_place_fleet(tmp_path_factory):
    """3 robots (one per site) x 3 pick-place episodes, collected once for the dataset tests. Read-only."""
    return collected(tmp_path_factory, "pick_place", "--robots", "3", "--episodes", "3", "--task", "pick_place",
                     "--workers", "2")


@pytest.fixture(scope="session")
def mt10_fleet(tmp_path_factory):
    """Meta-World's MT10 on 10 robots x 1 episode, state only: each robot runs one of the ten tasks. Read-only."""
    return collected(tmp_path_factory, "mt10", "--task", "metaworld/mt10", "--robots", "10", "--episodes", "1",
                     "--workers", "2")


@pytest.fixture(scope="session")
def trained_run(pick_place_fleet, tmp_path_factory):
    """A bc.py run of 20 steps on the pick-place fleet: checkpoints at steps 10 and 20. Read-only."""
    run = tmp_path_factory.mktemp("trained") / "run"
    completed = train("--data", pick_place_fleet, "--out", run, "--max-steps", "20")
    assert completed.returncode == 0, completed.stderr[-3000:]
    return run


@pytest.fixture
def run_copy(trained_run, tmp_path):
    """A copy of ``trained_run``, to damage or resume."""
    return shutil.copytree(trained_run, tmp_path / "run", symlinks=True)


@pytest.fixture(scope="session")
def camera_fleet(tmp_path_factory):
    """2 robots x 2 reach episodes with a 32x32 front camera. Read-only."""
    return collected(tmp_path_factory, "camera", "--robots", "2", "--episodes", "2", "--task", "reach",
                     "--cameras", "front", "--image-size", "32", "--workers", "2")


@pytest.fixture(scope="session")
def camera_cnn_run(camera_fleet, tmp_path_factory):
    """A bc.py run of the cnn on proprio+cameras: 40 steps on the camera fleet (batch 16, a loss every 10 steps,
    nothing held out). Read-only."""
    run = tmp_path_factory.mktemp("camera_cnn") / "run"
    completed = train("--data", camera_fleet, "--out", run, "--policy", "cnn", "--max-steps", "40",
                      "--batch-size", "16", "--log-interval", "10", "--val-fraction", "0")
    assert completed.returncode == 0, completed.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def module_scheduler():
    """The address of a dask cluster of 2 workers that a module's runs share (deployment rounds, federated
    training): each run pays for its work, not for starting workers, which import torch and MuJoCo once
    (train.fleet.deploy, as deploy_round's own cluster's workers do)."""
    with dask_cluster(workers=2, preload=("train.fleet.deploy",)) as address:
        yield address
