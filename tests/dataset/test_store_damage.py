"""The store half of the fault matrix (docs/reliability.md), on copies of real collections.

Each kind of damage is found by ``dataset verify`` (exit 1, naming the shard and the array),
refused by training with one line that names the shard, the array and the chunk, and
repaired by ``collect --repair`` into stores equal to the originals, bit for bit.
"""

import shutil

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from collect_helpers import assert_same_stores
from collect.cli import main as collect_main
from collect.repair import ASIDE
from dataset import FleetStore
from dataset.cli import main as dataset_main
from fault_helpers import assert_one_line, exit_code_of, flip_byte, truncate
from train.bc import main as bc_main
from train_helpers import QUICK

DAMAGE = {"flip": flip_byte, "truncate": truncate, "delete": lambda path: path.unlink()}
# (case, fleet fixture, array of robot 1, its first chunk, damage, what training reports)
CASES = [
    ("bit flip in a float chunk", "pick_place_fleet", "data/action", "c.0.0", "flip", "crc32c checksum does not match"),
    ("bit flip in an image chunk", "camera_fleet", "data/observation.images.front", "c.0.0.0.0", "flip",
     "crc32c checksum does not match"),
    ("bit flip in episode_ends", "pick_place_fleet", "meta/episode_ends", "c.0", "flip", "meta/episode_ends is damaged"),
    ("truncated chunk", "pick_place_fleet", "data/observation.state", "c.0.0", "truncate",
     "crc32c checksum does not match"),
    ("deleted chunk", "camera_fleet", "data/observation.state", "c.0.0", "delete", "is missing"),
    ("deleted episode_ends chunk", "pick_place_fleet", "meta/episode_ends", "c.0", "delete",
     "shows 0 committed episodes, manifest.json records 3"),
]
POLICY = {"pick_place_fleet": [], "camera_fleet": ["--policy", "cnn"]}  # a policy that reads the damaged array


def damaged_copy(request, fixture: str, tmp_path, damages) -> tuple:
    original = request.getfixturevalue(fixture)
    copy = shutil.copytree(original, tmp_path / "fleet")
    for robot, array, chunk, damage in damages:
        DAMAGE[damage](copy / f"robot_{robot:04d}.zarr" / array / chunk)
    return original, copy


@pytest.mark.parametrize("case, fixture, array, chunk, damage, reported", CASES, ids=[case[0] for case in CASES])
def test_damage_is_found_by_verify_and_refused_by_training_in_one_line(request, tmp_path, capsys, case, fixture,
                                                                         array, chunk, damage, reported):
    _, copy = damaged_copy(request, fixture, tmp_path, [(1, array, chunk, damage)])
    assert exit_code_of(dataset_main, ["verify", copy]) == 1
    found = capsys.readouterr()
    assert f"problem(s) in {copy}" in found.err
    assert all("robot_0001.zarr" in line and array in line for line in found.out.splitlines()), found.out

    assert exit_code_of(bc_main, ["--data", copy, "--out", tmp_path / "run", *QUICK, *POLICY[fixture]]) == 2
    refused = capsys.readouterr().err
    assert_one_line(refused, "robot_0001.zarr", array, reported, f"collect --repair {copy}")
    if array.startswith("data/"):  # a data chunk is named with the frames and episodes it holds
        assert_one_line(refused, f"chunk {chunk} (frames 0-", "episodes 0-")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["pick_place_fleet", "camera_fleet"])
def test_repair_recollects_exactly_the_damaged_robots_bit_for_bit(request, tmp_path, capsys, fixture):
    damages = {"pick_place_fleet": [(0, "data/action", "c.0.0", "flip"), (2, "meta/episode_ends", "c.0", "flip")],
               "camera_fleet": [(1, "data/observation.images.front", "c.0.0.0.0", "truncate")]}[fixture]
    original, copy = damaged_copy(request, fixture, tmp_path, damages)
    if fixture == "pick_place_fleet":
        shutil.rmtree(copy / "robot_0001.zarr")  # a deleted shard too
    intact = {path.name: path.stat().st_mtime_ns for path in copy.glob("robot_*.zarr")
              if int(path.stem.split("_")[1]) not in {robot for robot, *_ in damages}}

    collect_main(["--repair", str(copy), "--workers", "1"])
    printed = capsys.readouterr().out
    damaged = sorted({robot for robot, *_ in damages} | ({1} if fixture == "pick_place_fleet" else set()))
    assert f"repaired: recollected robots {', '.join(map(str, damaged))}" in printed
    assert printed.strip().endswith("OK")
    assert_same_stores(original, copy)
    assert not (copy / ASIDE).exists()
    assert {name: (copy / name).stat().st_mtime_ns for name in intact} == intact  # the others are not touched


def test_repair_of_a_clean_store_changes_nothing(pick_place_fleet, tmp_path, capsys):
    copy = shutil.copytree(pick_place_fleet, tmp_path / "fleet")
    collect_main(["--repair", str(copy)])
    assert "repaired" not in capsys.readouterr().out
    assert_same_stores(pick_place_fleet, copy)


@pytest.mark.slow
def test_values_outside_their_declared_bounds_are_reported_and_repaired(pick_place_fleet, tmp_path, capsys):
    copy = shutil.copytree(pick_place_fleet, tmp_path / "fleet")
    actions = zarr.open_group(copy / "robot_0002.zarr", mode="r+")["data/action"]
    frame = int(FleetStore.open(copy).shards[2].episode_ends[0]) + 3  # frame 3 of episode 1
    actions[frame, 0] = 7.5  # a valid chunk with a valid checksum, holding an impossible action
    assert exit_code_of(dataset_main, ["verify", copy]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line == (f"robot_0002.zarr episode 1: data/action ee_dx = 7.5 at shard frame {frame} is outside its "
                    "declared bounds [-1, 1]")
    collect_main(["--repair", str(copy), "--workers", "1"])
    assert_same_stores(pick_place_fleet, copy)


def test_a_store_written_before_checksums_still_reads_and_verify_notes_it(pick_place_fleet, tmp_path, capsys):
    copy = shutil.copytree(pick_place_fleet, tmp_path / "fleet")
    data = zarr.open_group(copy / "robot_0000.zarr", mode="r+")["data"]
    actions = data["action"][:]
    old = data.create_array("action", shape=actions.shape, dtype=actions.dtype, chunks=data["action"].chunks,
                            compressors=ZstdCodec(level=3), chunk_key_encoding={"name": "default", "separator": "."},
                            overwrite=True)
    old[:] = actions
    dataset_main(["verify", str(copy)])
    printed = capsys.readouterr().out
    assert "note: robot_0000.zarr: 1 arrays (data/action) have no checksums" in printed and "OK" in printed
    np.testing.assert_array_equal(FleetStore.open(copy).episode(0, 0)["action"],
                                  FleetStore.open(pick_place_fleet).episode(0, 0)["action"])
