"""LeRobot interop: a fleet store exported to a LeRobotDataset v3.0 and imported back."""

import json
import os
import re
import shutil

import numpy as np
import pytest
import zarr
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from collect_helpers import assert_same_stores
from dataset import FleetStore
from dataset.lerobot_io import SIDECAR, export_lerobot, import_lerobot
from dataset.verify import verify_store
from sim.fleet import SITES, make_robot

IMAGE = "observation.images.front"
PRIVILEGED = "observation.environment_state"


@pytest.fixture(scope="module")
def fleet(camera_fleet):
    """2 robots x 2 reach episodes with a 32 x 32 front camera (tests/conftest.py)."""
    return camera_fleet


@pytest.fixture(scope="module")
def exported(fleet, tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot") / "fleet"
    assert export_lerobot(FleetStore.open(fleet), root, repo_id="robofleet/test", progress=False,
                          inputs="state+cameras") == root  # everything: the import gives back the same store
    return root


@pytest.mark.slow
def test_round_trip_gives_back_the_same_store(fleet, exported, tmp_path):
    out = import_lerobot(exported, tmp_path / "imported", progress=False)
    assert_same_stores(fleet, out)  # robots, episode counts, episode_info and every array, bit for bit
    original, imported = FleetStore.open(fleet), FleetStore.open(out)
    assert verify_store(imported) == [] and imported.features == original.features
    for robot in original.robots:
        assert imported.profile(robot) == original.profile(robot) == make_robot(robot)
    before, after = original.manifest, imported.manifest
    for key in ("schema_version", "task", "fps", "seed", "data_config", "collect_config", "totals", "robots"):
        assert after[key] == before[key], key
    assert zarr.open_group(out / "robot_0001.zarr", mode="r").attrs["task"] == "reach"


@pytest.mark.slow
def test_the_export_is_a_lerobot_dataset_with_robot_and_site_per_frame(fleet, exported):
    store = FleetStore.open(fleet)
    dataset = LeRobotDataset("robofleet/test", root=exported)  # local files only: no hub access
    assert dataset.num_episodes == store.num_episodes == 4 and dataset.num_frames == store.num_frames
    assert list(dataset.meta.tasks.index) == ["reach"]
    assert dataset.features[IMAGE]["dtype"] == "image" and dataset.features["next.success"]["dtype"] == "bool"
    columns = dataset.hf_dataset.with_format("numpy").select_columns(["robot_id", "site_id"])[:]
    lengths = {robot: sum(store.episode_info(robot, i)["length"] for i in range(2)) for robot in store.robots}
    np.testing.assert_array_equal(columns["robot_id"], np.repeat([0, 1], [lengths[0], lengths[1]]))
    np.testing.assert_array_equal(columns["site_id"], np.repeat([SITES.index(make_robot(r).site) for r in (0, 1)],
                                                                [lengths[0], lengths[1]]))
    frame = dataset[dataset.num_frames - 1]
    assert frame["task"] == "reach" and frame["robot_id"] == 1 and frame[IMAGE].shape == (3, 32, 32)
    sidecar = json.loads((exported / SIDECAR).read_text())
    assert sidecar["sites"] == list(SITES) and sidecar["robots"]["1"]["profile"]["site"] == make_robot(1).site


def test_the_default_export_leaves_out_the_privileged_state_and_imports_without_it(fleet, tmp_path):
    original = FleetStore.open(fleet)
    root = export_lerobot(original, tmp_path / "visuomotor", progress=False)
    assert PRIVILEGED not in LeRobotDataset("robofleet/visuomotor", root=root).features
    assert json.loads((root / SIDECAR).read_text())["inputs"] == "proprio+cameras"
    imported = FleetStore.open(import_lerobot(root, tmp_path / "out", progress=False))
    assert verify_store(imported) == [] and imported.features == {
        name: feature for name, feature in original.features.items() if name != PRIVILEGED}
    assert imported.episode_info(1, 1) == original.episode_info(1, 1)  # the sidecar still applies
    for name, values in imported.episode(1, 1).items():
        np.testing.assert_array_equal(values, original.episode(1, 1)[name], err_msg=name)


def test_inputs_the_store_cannot_feed_are_refused_before_anything_is_written(pick_place_fleet, tmp_path):
    with pytest.raises(ValueError, match=re.escape("--inputs proprio+cameras needs camera images and the store has "
                                                   "none")):
        export_lerobot(FleetStore.open(pick_place_fleet), tmp_path / "export", inputs="proprio+cameras",
                       progress=False)
    assert list(tmp_path.iterdir()) == []


def test_videos_round_trip_within_codec_loss_and_leave_the_scheduler_as_it_was(fleet, tmp_path):
    scheduling = os.sched_getscheduler(0), os.sched_getparam(0)
    root = export_lerobot(FleetStore.open(fleet), tmp_path / "video", use_videos=True, progress=False,
                          inputs="state+cameras")
    # SVT-AV1, run as root, moves its caller to real-time FIFO 99, which every later subprocess would inherit
    assert (os.sched_getscheduler(0), os.sched_getparam(0)) == scheduling
    assert LeRobotDataset("robofleet/video", root=root, video_backend="pyav").features[IMAGE]["dtype"] == "video"
    original, imported = FleetStore.open(fleet), FleetStore.open(import_lerobot(root, tmp_path / "out", progress=False))
    assert verify_store(imported) == [] and imported.features == original.features
    left, right = original.episode(1, 1), imported.episode(1, 1)
    np.testing.assert_array_equal(left["observation.state"], right["observation.state"])
    assert right[IMAGE].dtype == np.uint8 and right[IMAGE].shape == left[IMAGE].shape
    assert np.abs(left[IMAGE].astype(int) - right[IMAGE]).mean() < 8  # AV1 is lossy


def test_a_foreign_dataset_without_robot_id_becomes_one_shard(tmp_path):
    features = {"observation.state": {"dtype": "float32", "shape": (3,), "names": ["x", "y", "z"]},
                "action": {"dtype": "float32", "shape": (2,), "names": None}}
    dataset = LeRobotDataset.create("someone/tiny", fps=10, features=features, root=tmp_path / "tiny", use_videos=False)
    rng = np.random.default_rng(0)
    episodes = [{name: rng.normal(size=(length, *f["shape"])).astype(np.float32) for name, f in features.items()}
                for length in (3, 5)]
    for episode in episodes:
        for t in range(len(episode["action"])):
            dataset.add_frame({name: values[t] for name, values in episode.items()} | {"task": "wave"})
        dataset.save_episode()
    dataset.finalize()

    store = FleetStore.open(import_lerobot(tmp_path / "tiny", tmp_path / "out", progress=False))
    assert store.robots == [0] and store.num_episodes_of(0) == 2 and verify_store(store) == []
    assert store.features == {name: {**f, "shape": list(f["shape"])} for name, f in features.items()}
    for index, episode in enumerate(episodes):
        length = len(episode["action"])
        assert store.episode_info(0, index) == {"seed": -1, "success": True, "index": index, "length": length}
        for name, values in episode.items():
            np.testing.assert_array_equal(store.episode(0, index)[name], values)
    assert store.manifest["task"] == {"name": "wave", "env_id": None}
    assert store.manifest["robots"]["0"]["site"] == "unknown"
    again = LeRobotDataset("robofleet/again", root=export_lerobot(store, tmp_path / "again", progress=False))
    assert again.num_frames == 8 and again[0]["site_id"] == -1 and again[0]["task"] == "wave"


@pytest.mark.slow
def test_without_the_sidecar_robot_id_still_splits_the_shards(fleet, exported, tmp_path):
    root = tmp_path / "no_sidecar"
    shutil.copytree(exported, root)
    (root / SIDECAR).unlink()
    original, imported = FleetStore.open(fleet), FleetStore.open(import_lerobot(root, tmp_path / "out", progress=False))
    assert imported.robots == [0, 1] and verify_store(imported) == []
    for robot in imported.robots:
        assert imported.num_episodes_of(robot) == 2
        info = imported.episode_info(robot, 1)
        assert info == {**original.episode_info(robot, 1), "seed": -1}  # success read back from next.success
        for name, values in original.episode(robot, 1).items():
            np.testing.assert_array_equal(imported.episode(robot, 1)[name], values, err_msg=name)


@pytest.mark.slow
def test_refusals(fleet, exported, tmp_path):
    with pytest.raises(ValueError, match="already exists"):
        export_lerobot(FleetStore.open(fleet), exported, progress=False)
    (tmp_path / "empty").mkdir()
    shutil.copy(fleet / "manifest.json", tmp_path / "empty")  # a collection whose robots have committed nothing yet
    with pytest.raises(ValueError, match="no committed episodes"):
        export_lerobot(FleetStore.open(tmp_path / "empty"), tmp_path / "new", progress=False)
    assert not (tmp_path / "new").exists()

    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        import_lerobot(exported, out, progress=False)
    assert (out / "keep.txt").read_text() == "mine"
    import_lerobot(exported, out, overwrite=True, progress=False)
    assert not (out / "keep.txt").exists() and FleetStore.open(out).num_episodes == 4

    with pytest.raises(FileNotFoundError, match="no LeRobotDataset"):
        import_lerobot(tmp_path / "missing", tmp_path / "out2", progress=False)
    assert not (tmp_path / "missing").exists()  # LeRobotDataset would have created it to download into
    old = shutil.copytree(exported, tmp_path / "v21")
    info = json.loads((old / "meta/info.json").read_text())
    (old / "meta/info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(ValueError, match="v2.1"):
        import_lerobot(old, tmp_path / "out2", progress=False)


def test_an_interrupted_export_leaves_nothing_behind(fleet, tmp_path, monkeypatch):
    store = FleetStore.open(fleet)
    calls = []

    def episode_then_crash(robot_id, index):
        calls.append(index)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return FleetStore.episode(store, robot_id, index)

    monkeypatch.setattr(store, "episode", episode_then_crash)
    with pytest.raises(KeyboardInterrupt):
        export_lerobot(store, tmp_path / "export", progress=False)
    assert list(tmp_path.iterdir()) == []  # neither the dataset nor its half-built copy
