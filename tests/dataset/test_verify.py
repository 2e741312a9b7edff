"""dataset.verify: a damaged copy of a real collection is reported by shard and episode."""

import json
import os
import shutil

import numpy as np
import pytest
import zarr

from collect_helpers import run_collect
from dataset import FleetStore
from dataset.verify import Problem, verify_store


@pytest.fixture
def copy(pick_place_fleet, tmp_path):
    """A private copy of conftest's 3 robots x 3 pick-place episodes, to damage."""
    return shutil.copytree(pick_place_fleet, tmp_path / "fleet")


def problems(path, **options) -> list[Problem]:
    """The damage found (notes, such as an array rewritten here without checksums, left out)."""
    return verify_store(FleetStore.open(path), **options)


def where(found: list[Problem]) -> set[tuple]:
    return {(problem.shard, problem.episode) for problem in found}


def ends(path, robot: int) -> np.ndarray:
    return zarr.open_group(path / f"robot_{robot:04d}.zarr", mode="r")["meta/episode_ends"][:]


def test_a_clean_store_has_no_problems(pick_place_fleet):
    store = FleetStore.open(pick_place_fleet)
    assert verify_store(store) == [] and verify_store(store, check_data=False) == []
    assert verify_store(store, progress=True) == []


def test_a_problem_prints_as_one_line():
    assert str(Problem("robot_0003.zarr", 4, "data/action has NaN")) == "robot_0003.zarr episode 4: data/action has NaN"
    assert str(Problem("robot_0003.zarr", None, "attrs lack fps")) == "robot_0003.zarr: attrs lack fps"
    assert str(Problem(None, None, "out: no manifest.json")) == "out: no manifest.json"


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
@pytest.mark.parametrize("array", ["data/observation.state", "meta/episode_seed"])
def test_an_undecodable_chunk_names_the_episodes_it_holds(copy, damage, array):
    chunk = copy / "robot_0001.zarr" / array / ("c.0.0" if array.startswith("data") else "c.0")
    content = chunk.read_bytes()
    damaged = {"truncate": content[: len(content) // 2], "garbage": os.urandom(len(content)), "empty": b""}
    chunk.write_bytes(damaged[damage])
    found = problems(copy)
    assert where(found) == {("robot_0001.zarr", episode) for episode in range(3)}  # one chunk holds all 3 episodes
    assert all(array in problem.message and "is damaged" in problem.message for problem in found)
    if array.startswith("data"):
        assert problems(copy, check_data=False) == []  # structure only: chunk contents are not read


def test_a_corrupt_chunk_names_only_the_episodes_whose_frames_it_covers(copy):
    shard = copy / "robot_0002.zarr"
    root = zarr.open_group(shard, mode="r+")
    actions = root["data/action"][:]
    rechunked = root["data"].create_array("action", shape=actions.shape, dtype=actions.dtype, chunks=(2, 5),
                                          overwrite=True)
    rechunked[:] = actions
    row = (len(actions) - 1) // 2  # the last 2-frame chunk: inside the last episode
    (shard / f"data/action/c/{row}/0").write_bytes(b"not zstd")
    (found,) = problems(copy)
    assert (found.shard, found.episode) == ("robot_0002.zarr", 2)
    assert f"data/action chunk c/{row}/0 (frames {2 * row}-" in found.message


def test_a_missing_chunk_is_found_without_reading_data(copy):
    (copy / "robot_0000.zarr/data/action/c.0.0").unlink()
    (copy / "robot_0002.zarr/meta/episode_index/c.0").unlink()
    for check_data in (True, False):
        found = problems(copy, check_data=check_data)
        assert where(found) == {(f"robot_{robot:04d}.zarr", episode) for robot in (0, 2) for episode in range(3)}
        assert all("is missing" in problem.message for problem in found)


@pytest.mark.slow
def test_a_chunk_that_zarr_leaves_out_because_it_is_all_zeros_is_not_missing(tmp_path):
    out = tmp_path / "one"
    assert run_collect(out, "--robots", "1", "--episodes", "1", "--task", "reach", "--workers", "1").returncode == 0
    chunk = out / "robot_0000.zarr/meta/episode_index/c.0"
    assert chunk.exists()  # collect writes every chunk
    chunk.unlink()  # as zarr's default writer would: its one value is 0, the fill value
    assert problems(out) == []


def test_a_damaged_image_chunk_names_its_episodes(camera_fleet, tmp_path):
    copy = shutil.copytree(camera_fleet, tmp_path / "fleet")
    chunk = copy / "robot_0001.zarr/data/observation.images.front/c.0.0.0.0"  # blosc-zstd, 32 frames
    chunk.write_bytes(chunk.read_bytes()[:100])
    (copy / "robot_0000.zarr/data/observation.images.front/c.0.0.0.0").unlink()
    found = problems(copy)
    assert where(found) == {(f"robot_{robot:04d}.zarr", episode) for robot in (0, 1) for episode in range(2)}
    assert [p.message.split(" (")[0] for p in found] == ["data/observation.images.front chunk c.0.0.0.0"] * 4


def test_a_missing_shard_or_manifest_is_reported(copy):
    shutil.rmtree(copy / "robot_0002.zarr")
    assert problems(copy) == [Problem("robot_0002.zarr", None, "listed in manifest.json but missing")]
    (copy / "manifest.json").unlink()
    (found,) = problems(copy)
    assert found.shard is None and found.episode is None and "no manifest.json" in found.message


def test_nan_and_inf_name_the_episode_and_frame(copy):
    for robot, feature, episode, frame, value in [(1, "observation.state", 1, 3, np.nan), (2, "action", 2, 0, -np.inf)]:
        array = zarr.open_group(copy / f"robot_{robot:04d}.zarr", mode="r+")[f"data/{feature}"]
        start = int(ends(copy, robot)[episode - 1])
        array[start + frame, 1] = value
        array[start + frame + 1, 0] = value  # a second bad frame in the same episode is not reported again
    found = problems(copy)
    assert where(found) == {("robot_0001.zarr", 1), ("robot_0002.zarr", 2)}
    assert "data/observation.state has NaN or inf at frame 3 " in str(found[0])
    assert "data/action has NaN or inf at frame 0 " in str(found[1])
    assert problems(copy, check_data=False) == []


def test_broken_episode_ends_are_reported(copy):
    meta = zarr.open_group(copy / "robot_0001.zarr", mode="r+")["meta"]
    first, second, third = meta["episode_ends"][:]
    meta["episode_ends"][:] = [first, third, second]  # not increasing: only 2 committed episodes remain visible
    found = problems(copy)
    assert ("robot_0001.zarr", 2) in where(found) and any("not increasing" in p.message for p in found)
    assert any(p.episode == 1 and "disagrees with episode_ends" in p.message for p in found)
    assert any(p.episode is None and "records 3 committed episodes, the shard has 2" in p.message for p in found)


def test_episode_ends_past_the_data_and_short_or_duplicate_meta_are_reported(copy):
    meta = zarr.open_group(copy / "robot_0000.zarr", mode="r+")["meta"]
    meta["episode_ends"][2] += 1000
    meta["episode_index"][2] = 0
    zarr.open_group(copy / "robot_0001.zarr", mode="r+")["meta/episode_seed"].resize((2,))
    found = problems(copy, check_data=False)
    assert where(found) == {("robot_0000.zarr", 2), ("robot_0001.zarr", 2)}
    messages = " | ".join(map(str, found))
    assert "episode_ends need" in messages and "disagrees with episode_ends" in messages
    assert "episode_index 0 is committed twice (also episode 0)" in messages
    assert "robot_0001.zarr episode 2: meta/episode_seed has 2 entries for 3 episodes" in messages


def test_a_lost_episode_ends_chunk_is_caught_by_the_manifest_counts(copy):
    (copy / "robot_0002.zarr/meta/episode_ends/c.0").unlink()  # zarr now reads zeros: no episode looks committed
    assert FleetStore.open(copy).num_episodes_of(2) == 0
    assert [(p.shard, p.episode) for p in problems(copy)] == [("robot_0002.zarr", None)]


def test_a_bad_schema_version_or_missing_attrs_are_reported(copy):
    metadata = copy / "robot_0001.zarr/zarr.json"
    content = json.loads(metadata.read_text())
    content["attributes"]["schema_version"] = 99
    del content["attributes"]["fps"]
    metadata.write_text(json.dumps(content))
    assert [str(p) for p in problems(copy)] == ["robot_0001.zarr: attrs lack fps",
                                                "robot_0001.zarr: schema version 99, expected 1"]


def test_a_corrupt_episode_ends_chunk_is_reported_not_raised(copy):
    chunk = copy / "robot_0001.zarr/meta/episode_ends/c.0"
    chunk.write_bytes(b"garbage" * 4)
    store = FleetStore.open(copy)  # opening still works: the shard just shows no episodes
    assert store.num_episodes_of(1) == 0
    [problem] = problems(copy)
    assert problem.shard == "robot_0001.zarr" and "episode_ends is damaged" in problem.message


def test_a_plug_in_task_the_manifest_names_is_imported_only_with_task(copy, planted_module):
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["data_config"]["task"] = manifest["task"]["reference"] = "planted:TASK"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    notes = [problem for problem in verify_store(FleetStore.open(copy), notes=True) if problem.note]
    assert any("values not checked against bounds" in str(note) and "pass --task planted:TASK" in str(note)
               for note in notes), notes
    assert not planted_module.exists()
    verify_store(FleetStore.open(copy), notes=True, given_task="planted:TASK")  # the user's word imports it
    assert planted_module.exists()
