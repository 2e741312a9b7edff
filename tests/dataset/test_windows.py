"""dataset windows: contents against the raw arrays, padding, modes, selection and bad data."""

import random
import shutil

import numpy as np
import pytest
import torch
import zarr

from collect_helpers import run_collect
from dataset import FleetStore
from dataset.episodes import select_episodes, split_episodes
from dataset.chunks import DataError
from dataset.windows import FleetWindowDataset, WindowSpec
from sim.fleet import make_robot

N_OBS, HORIZON = 2, 16


def expected_window(episode: dict, t: int, deltas) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``t + deltas`` of one episode, edge-padded, and the padding mask: built the slow way."""
    length = len(episode)
    rows, pad = [], []
    for delta in deltas:
        rows.append(episode[min(max(t + delta, 0), length - 1)])
        pad.append(not 0 <= t + delta < length)
    return np.stack(rows), np.array(pad)


def all_windows(store: FleetStore, mode: str, **kwargs) -> FleetWindowDataset:
    return FleetWindowDataset(store, select_episodes(store), WindowSpec.of(N_OBS, HORIZON, store.features),
                              mode=mode, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["memory", "streaming"])
def test_every_window_matches_the_raw_episode_arrays_with_edge_padding(pick_place_fleet, mode):
    store = FleetStore.open(pick_place_fleet)
    dataset = all_windows(store, mode)
    assert len(dataset) == store.num_frames
    padded_starts = padded_ends = 0
    for i in range(len(dataset)):
        sample = dataset[i]
        robot, index, t = int(sample["robot_id"]), int(sample["episode_index"]), int(sample["frame_index"])
        episode = store.episode(robot, index)
        for key in ("observation.state", "observation.environment_state", "action"):
            rows, pad = expected_window(episode[key], t, dataset.spec.delta_indices[key])
            np.testing.assert_array_equal(sample[key].numpy(), rows, err_msg=f"sample {i} {key}")
            np.testing.assert_array_equal(sample[f"{key}_is_pad"].numpy(), pad)
        padded_starts += bool(sample["observation.state_is_pad"][0])
        padded_ends += bool(sample["action_is_pad"][-1])
    assert padded_starts == store.num_episodes  # only t = 0 pads the observation history
    assert padded_ends == store.num_episodes * (HORIZON - 1)  # the last 15 frames pad the action chunk


def test_a_batch_is_the_stack_of_its_samples_and_both_modes_agree(pick_place_fleet):
    store = FleetStore.open(pick_place_fleet)
    memory = all_windows(store, "memory")
    streaming = all_windows(store, "streaming", cache_bytes=20_000)  # tiny: forces evictions
    indices = random.Random(0).sample(range(len(memory)), 64)
    batch = memory[indices]
    for position, i in enumerate(indices[:8]):
        single = memory[i]
        for key, value in single.items():
            torch.testing.assert_close(batch[key][position], value)
    streamed = streaming[indices]
    assert batch.keys() == streamed.keys()
    for key in batch:
        torch.testing.assert_close(streamed[key], batch[key])
    streamed_all = streaming[list(range(len(streaming)))]
    torch.testing.assert_close(streamed_all["action"], memory[list(range(len(memory)))]["action"])
    frames = streaming.frames
    assert frames.misses > 0 and (frames.cached_bytes <= frames.cache_bytes or len(frames._cache) == 1)


def test_image_windows_are_the_stored_uint8_frames(camera_fleet):
    store = FleetStore.open(camera_fleet)
    dataset = all_windows(store, "streaming")
    sample = dataset[3]
    image = sample["observation.images.front"]
    assert image.shape == (N_OBS, 32, 32, 3) and image.dtype == torch.uint8
    raw = store.episode(int(sample["robot_id"]), int(sample["episode_index"]))["observation.images.front"]
    t = int(sample["frame_index"])
    np.testing.assert_array_equal(image.numpy(), raw[[max(t - 1, 0), t]])


@pytest.mark.slow
def test_selection_by_robot_site_and_success(tmp_path):
    out = tmp_path / "coin"
    assert run_collect(out, "--task", "toy_tasks:COIN", "--robots", "3", "--episodes", "6",
                       "--keep-failures").returncode == 0
    store = FleetStore.open(out)
    everything = select_episodes(store, success=None)
    assert len(everything) == 18
    successes, failures = select_episodes(store), select_episodes(store, success=False)
    assert all(e.seed % 2 == 0 for e in successes) and all(e.seed % 2 == 1 for e in failures)
    assert len(successes) + len(failures) == 18
    assert {e.robot_id for e in select_episodes(store, robots=[1], success=None)} == {1}
    site = make_robot(2).site
    assert {e.robot_id for e in select_episodes(store, sites=[site], success=None)} == \
        {r for r in range(3) if make_robot(r).site == site}
    assert select_episodes(store, tasks=["pick_place"]) == []
    assert {e.task for e in everything} == {"coin"}  # the spec name, as stored in the shard attrs
    capped = select_episodes(store, per_robot=2)  # each robot's first two successes, failures skipped
    for robot in range(3):
        assert [e.index for e in capped if e.robot_id == robot] == \
            [e.index for e in successes if e.robot_id == robot][:2]
    assert [e.index for e in select_episodes(store, robots=[1], success=None, per_robot=4)] == [0, 1, 2, 3]


def test_the_train_val_split_is_deterministic_disjoint_and_complete(pick_place_fleet):
    episodes = select_episodes(FleetStore.open(pick_place_fleet))
    train, val = split_episodes(episodes, 0.34, seed=7)
    assert len(val) == round(len(episodes) * 0.34) and set(train).isdisjoint(val)
    assert set(train) | set(val) == set(episodes)
    shuffled = random.Random(1).sample(episodes, len(episodes))
    assert split_episodes(shuffled, 0.34, seed=7)[1] == sorted(val, key=shuffled.index)
    assert any(split_episodes(episodes, 0.34, seed=s)[1] != val for s in range(5))


@pytest.mark.parametrize("mode", ["memory", "streaming"])
def test_a_split_shares_the_frames_and_gives_the_windows_of_a_dataset_built_on_its_episodes(pick_place_fleet, mode):
    store = FleetStore.open(pick_place_fleet)
    episodes = select_episodes(store)
    train, val = split_episodes(episodes, 0.34, seed=7)
    spec = WindowSpec.of(N_OBS, HORIZON, store.features)
    both = FleetWindowDataset(store, train + val, spec, mode=mode)
    for part in (train, val):
        subset, alone = both.with_episodes(part), FleetWindowDataset(store, part, spec, mode=mode)
        assert subset.frames is both.frames and len(subset) == len(alone) == sum(e.length for e in part)
        everything = list(range(len(alone)))
        for key, value in alone[everything].items():
            torch.testing.assert_close(subset[everything][key], value)
    assert len(both) == store.num_frames  # the subsets left the whole dataset as it was
    lone = FleetWindowDataset(store, [e for e in episodes if e.robot_id == 0], spec, mode=mode)
    with pytest.raises(ValueError, match="robot 1's episodes are not in this dataset's shards"):
        lone.with_episodes([e for e in episodes if e.robot_id == 1])


def test_nan_in_the_data_is_refused_naming_shard_and_episode(pick_place_fleet, tmp_path):
    broken = tmp_path / "fleet"
    shutil.copytree(pick_place_fleet, broken)
    store = FleetStore.open(broken)
    start, _ = store.shards[1].bounds(2)
    array = zarr.open_array(broken / "robot_0001.zarr" / "data" / "observation.state", mode="r+")
    array[start + 3, 0] = np.nan
    with pytest.raises(DataError, match=r"robot_0001.zarr episode 2: observation.state has NaN or inf"):
        all_windows(FleetStore.open(broken), "memory")
    streaming = all_windows(FleetStore.open(broken), "streaming")
    with pytest.raises(DataError, match=r"robot_0001.zarr episode 2"):
        streaming[list(range(len(streaming)))]


def test_bad_window_requests_are_refused(pick_place_fleet):
    store = FleetStore.open(pick_place_fleet)
    episodes = select_episodes(store)
    with pytest.raises(ValueError, match="no feature 'observation.images.front'"):
        FleetWindowDataset(store, episodes, WindowSpec({"observation.images.front": (0,)}))
    with pytest.raises(ValueError, match="no episodes"):
        FleetWindowDataset(store, [], WindowSpec.of(1, 1, store.features))
    with pytest.raises(ValueError, match="mode"):
        FleetWindowDataset(store, episodes, WindowSpec.of(1, 1, store.features), mode="lazy")
    with pytest.raises(IndexError):
        FleetWindowDataset(store, episodes, WindowSpec.of(1, 1, store.features))[[store.num_frames]]
