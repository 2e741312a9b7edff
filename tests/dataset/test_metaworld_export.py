"""A Meta-World collection exported to a LeRobotDataset under LeRobot's own Meta-World names."""

import json

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.datasets.utils import dataset_to_policy_features
from lerobot.envs.configs import MetaworldEnv
from lerobot.envs.utils import env_to_policy_features

from collect_helpers import collected
from dataset import FleetStore
from dataset.lerobot_io import SIDECAR, export_lerobot, import_lerobot
from dataset.lerobot_names import lerobot_tasks
from dataset.manifest import robot_task
from dataset.verify import verify_store
from sim.metaworld_tasks import DESCRIPTIONS

CAMERA = "observation.images.corner2"
PRIVILEGED = "observation.environment_state"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Meta-World's very_hard group (5 tasks) on 5 robots x 1 episode with a 64 x 64 corner2 camera."""
    return collected(tmp_path_factory, "very_hard", "--task", "metaworld/very_hard", "--robots", "5",
                     "--episodes", "1", "--cameras", "corner2", "--image-size", "64", "--workers", "2")


@pytest.fixture(scope="module")
def exported(fleet, tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot") / "very_hard"
    return export_lerobot(FleetStore.open(fleet), root, repo_id="robofleet/very_hard", progress=False)


@pytest.mark.slow
def test_every_frame_carries_its_tasks_instruction_and_the_corner2_image(fleet, exported):
    store = FleetStore.open(fleet)
    dataset = LeRobotDataset("robofleet/very_hard", root=exported)  # local files only: no hub access
    assert dataset.num_episodes == store.num_episodes == 5 and dataset.num_frames == store.num_frames
    columns = dataset.hf_dataset.with_format("numpy").select_columns(["episode_index", "robot_id"])[:]
    for episode, robot in enumerate(store.robots):  # the export writes the robots' episodes in order
        frames = np.flatnonzero(columns["episode_index"] == episode)
        assert set(columns["robot_id"][frames].reshape(-1)) == {robot}
        frame = dataset[int(frames[len(frames) // 2])]
        task = robot_task(store.manifest, robot)
        assert frame["task"] == DESCRIPTIONS[task.removeprefix("metaworld/")]
        assert frame["fleet_task_index"].item() == store.manifest["task"]["tasks"].index(task)
        image = (frame["observation.image"] * 255).round().byte().permute(1, 2, 0).numpy()  # C x H x W in [0, 1]
        np.testing.assert_array_equal(image, store.episode(robot, 0)[CAMERA][frame["frame_index"].item()])
    assert sorted(dataset.meta.tasks.index) == sorted(lerobot_tasks(store.manifest["task"]))


@pytest.mark.slow
def test_a_policy_trained_on_the_export_reads_what_lerobot_eval_gives_it(exported):
    trained = dataset_to_policy_features(LeRobotDataset("robofleet/very_hard", root=exported).features)
    evaluated = env_to_policy_features(MetaworldEnv(task="very_hard"))  # what lerobot-eval feeds a policy
    assert set(trained) == set(evaluated) == {"observation.image", "observation.state", "action"}
    for name in ("observation.state", "action"):
        assert trained[name] == evaluated[name], name
    assert trained["observation.image"].shape == (3, 64, 64)  # lerobot-eval renders 480 x 480: --image-size 480


@pytest.mark.slow
def test_the_export_imports_back_under_our_names(fleet, exported, tmp_path):
    original = FleetStore.open(fleet)
    imported = FleetStore.open(import_lerobot(exported, tmp_path / "imported", progress=False))
    assert json.loads((exported / SIDECAR).read_text())["names"] == {CAMERA: "observation.image",
                                                                     "task_index": "fleet_task_index"}
    assert verify_store(imported) == [] and imported.features == {
        name: feature for name, feature in original.features.items() if name != PRIVILEGED}
    assert imported.manifest["task"] == original.manifest["task"]
    for robot in original.robots:
        assert imported.episode_info(robot, 0) == original.episode_info(robot, 0)
        for name, values in imported.episode(robot, 0).items():
            np.testing.assert_array_equal(values, original.episode(robot, 0)[name], err_msg=name)


def test_a_single_meta_world_task_is_its_instruction_and_other_tasks_keep_their_names():
    assert lerobot_tasks({"name": "metaworld/pick-place-v3"}) == ["Pick and place a puck to a goal"]
    assert lerobot_tasks({"name": "reach"}) == ["reach"]
    assert lerobot_tasks({"name": "metaworld/hard", "tasks": ["metaworld/push-v3", "metaworld/push-back-v3"]}) == [
        "Push the puck to a goal"] * 2  # LeRobot's instructions do not tell these two apart
