"""One policy over many tasks: on a multi-task store the task is an input (``task_index``), and the
checkpoint lists it among its inputs and the store's tasks in its task record."""

import json

import numpy as np
import pytest
import torch

from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset.manifest import robot_task
from dataset.windows import FleetWindowDataset, WindowSpec
from train.checkpoint import open_checkpoint
from train.export import export_lerobot_policy
from train.policies.options import PolicyOptions
from train.policies.policy import make_policy, policy_spec
from train_helpers import train

TASKS = 3
FEATURES = {  # a multi-task store's features, as collect writes them
    "observation.state": {"dtype": "float32", "shape": [4]},
    "observation.environment_state": {"dtype": "float32", "shape": [5]},
    "observation.images.corner2": {"dtype": "image", "shape": [8, 8, 3]},
    "task_index": {"dtype": "int64", "shape": [1]},
    "action": {"dtype": "float32", "shape": [2]},
}
STATS = {name: {"mean": np.full(size, 0.1), "std": np.full(size, 2.0), "min": np.full(size, -3.0),
                "max": np.full(size, 4.0)}
         for name, size in (("observation.state", 4), ("observation.environment_state", 5), ("action", 2))}
STATS["observation.images.corner2"] = {k: np.full((3, 1, 1), v) for k, v in
                                       {"mean": 0.5, "std": 0.25, "min": 0.0, "max": 1.0}.items()}


@pytest.fixture(scope="module")
def mt10_run(mt10_fleet, tmp_path_factory):
    """The mlp trained 30 steps on ``mt10_fleet``."""
    run = tmp_path_factory.mktemp("mt10_run") / "run"
    completed = train("--data", mt10_fleet, "--out", run, "--max-steps", "30")
    assert completed.returncode == 0, completed.stderr[-3000:]
    return run


def actions_per_task(policy, observation: dict[str, np.ndarray], tasks: int) -> np.ndarray:
    """The first action of ``policy`` on ``observation`` with each task index in turn, as evaluation asks."""
    actions = []
    for index in range(tasks):
        policy.reset()
        torch.manual_seed(0)  # diffusion's starting noise: the same for every task
        actions.append(policy.select_action({**observation, "task_index": np.array([index], dtype=np.int64)}))
    return np.array(actions)


@pytest.mark.slow
def test_windows_carry_each_frames_task_index_as_an_integer(mt10_fleet):
    store = FleetStore.open(mt10_fleet)
    windows = FleetWindowDataset(store, select_episodes(store),
                                 WindowSpec.of(2, 4, ["observation.state", "task_index", "action"]))
    batch = windows[np.arange(len(windows))]
    assert batch["task_index"].dtype == torch.int64 and batch["task_index"].shape == (len(windows), 2, 1)
    tasks = store.manifest["task"]["tasks"]
    expected = [tasks.index(robot_task(store.manifest, int(robot))) for robot in batch["robot_id"]]
    assert (batch["task_index"][:, -1, 0] == torch.tensor(expected)).all()


@pytest.mark.slow
def test_a_multi_task_checkpoint_reads_the_task_and_lists_the_tasks(mt10_fleet, mt10_run):
    checkpoint = open_checkpoint(mt10_run)
    tasks = json.loads((mt10_fleet / "manifest.json").read_text())["task"]["tasks"]
    assert len(tasks) == 10 and checkpoint.spec.task_count == 10
    assert checkpoint.spec.features["task_index"] == [1]  # an input like observation.state
    assert (checkpoint.task["name"], checkpoint.task["reference"], checkpoint.task["tasks"]) == \
        ("metaworld/mt10", "metaworld/mt10", tasks)
    assert checkpoint.identity["tasks"] == tasks
    assert "task_index" not in checkpoint.stats  # categorical: never normalised

    store = FleetStore.open(mt10_fleet)
    frame = {name: np.asarray(store.shards[0].group[f"data/{name}"][0])
             for name in ("observation.state", "observation.environment_state")}
    actions = actions_per_task(checkpoint.policy(), frame, len(tasks))
    assert len({tuple(action.round(6)) for action in actions}) == len(tasks)  # the task really is an input


@pytest.mark.slow
def test_a_multi_task_policy_is_refused_by_the_lerobot_export_in_one_line(mt10_run, tmp_path):
    with pytest.raises(ValueError, match="is a multi-task policy") as error:
        export_lerobot_policy(mt10_run, tmp_path / "exported")
    assert "\n" not in str(error.value) and not (tmp_path / "exported").exists()


@pytest.mark.slow
def test_a_single_task_checkpoint_has_no_task_input(trained_run):
    checkpoint = open_checkpoint(trained_run)
    assert "task_index" not in checkpoint.spec.features and checkpoint.spec.task_count == 0
    assert "tasks" not in checkpoint.identity and "tasks" not in checkpoint.task


@pytest.mark.parametrize("kind", ["mlp", "cnn", "act", "diffusion"])
def test_every_kind_that_reads_the_state_reads_the_task(kind):
    inputs = "state" if kind == "mlp" else "proprio+cameras"
    spec = policy_spec(PolicyOptions(policy=kind, inputs=inputs, horizon=8, n_action_steps=3, hidden=(8,)),
                       FEATURES, TASKS)
    assert spec.features["task_index"] == [1] and spec.task_count == TASKS
    torch.manual_seed(0)
    policy = make_policy(spec, STATS).eval()
    observation = {"observation.state": np.full(4, 0.3, np.float32), "observation.environment_state": np.ones(5),
                   "observation.images.corner2": np.full((8, 8, 3), 90, np.uint8)}
    actions = actions_per_task(policy, observation, TASKS)
    assert len({tuple(action.round(6)) for action in actions}) == TASKS


def test_a_multi_task_policy_without_the_task_input_reads_no_task():
    spec = policy_spec(PolicyOptions(policy="act", inputs="proprio+cameras", task_input=False), FEATURES, TASKS)
    assert "task_index" not in spec.features and spec.task_count == 0


def test_a_multi_task_policy_without_the_state_is_refused():
    with pytest.raises(ValueError, match="reads its task beside observation.state"):
        policy_spec(PolicyOptions(policy="cnn", inputs="cameras"), FEATURES, TASKS)
