"""collect: layout, manifest, atomic commits, resume, failures and bad input."""

import contextlib
import json
import os
import socket
import subprocess
import urllib.request

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from collect.cli import main as collect_main
from collect.worker import to_features
from dataset.schema import features_of
from dataset.shard import (FRAMES_PER_CHUNK, SCHEMA_VERSION, WRITER_ZARR_CONFIG, InlineLocalStore, InlineZstdCodec,
                           read_progress, store_name)
from dataset.writer import EpisodeRecord, ShardWriter
from fault_helpers import assert_one_line, exit_code_of
from collect_helpers import (REPO, assert_same_stores, collect_command, collected, interrupt, run_collect,
                             start_collect, subprocess_env, wait_for_episodes)
from core.cluster import dask_client
from dataset import FleetStore
from dataset.verify import verify_store
from sim.fleet import episode_seed, make_robot
from sim.rollout import run_episode
from sim.tasks import resolve_task


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory):
    """3 robots x 4 pick-place episodes, collected once for the layout tests."""
    return collected(tmp_path_factory, "fleet", "--robots", "3", "--episodes", "4", "--task", "pick_place",
                     "--workers", "2")


def test_one_store_per_robot_with_the_documented_layout(small_fleet):
    visible = sorted(p.name for p in small_fleet.iterdir() if not p.name.startswith("."))
    assert visible == ["manifest.json", "robot_0000.zarr", "robot_0001.zarr", "robot_0002.zarr"]
    root = zarr.open_group(small_fleet / "robot_0001.zarr", mode="r")
    attrs = root.attrs
    assert attrs["schema_version"] == SCHEMA_VERSION and attrs["task"] == "pick_place" and attrs["fps"] == 20
    assert attrs["profile"] == make_robot(1).to_dict() | {"camera_offset": list(make_robot(1).camera_offset),
                                                          "table_rgba": list(make_robot(1).table_rgba),
                                                          "object_rgba": list(make_robot(1).object_rgba)}
    assert set(root["data"].array_keys()) == set(attrs["features"])
    state = root["data/observation.state"]
    assert state.dtype == np.float32 and state.chunks == (FRAMES_PER_CHUNK, 20)
    assert attrs["features"]["observation.state"]["names"][0] == "joint1_pos"
    meta = root["meta"]
    ends = meta["episode_ends"][:]
    assert len(ends) == 4 and np.all(np.diff(ends) > 0)
    np.testing.assert_array_equal(meta["episode_length"][:], np.diff(ends, prepend=0))
    np.testing.assert_array_equal(meta["episode_index"][:], [0, 1, 2, 3])
    np.testing.assert_array_equal(meta["episode_seed"][:], [episode_seed(0, 1, i) for i in range(4)])
    assert meta["episode_success"][:].all()
    assert ends[-1] == state.shape[0]


def test_manifest_records_config_counts_and_features(small_fleet):
    manifest = json.loads((small_fleet / "manifest.json").read_text())
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert manifest["task"] == {"name": "pick_place", "env_id": "robofleet/PickPlace-v0", "reference": "pick_place"}
    assert manifest["fps"] == 20 and manifest["seed"] == 0
    assert manifest["collect_config"]["episodes"] == 4 and manifest["code_version"]
    store = FleetStore.open(small_fleet)
    assert manifest["features"] == store.features
    assert manifest["totals"] == {"robots": 3, "episodes": store.num_episodes, "frames": store.num_frames}
    for robot in store.robots:
        entry = manifest["robots"][str(robot)]
        assert entry["episodes"] == store.num_episodes_of(robot) == 4
        assert entry["site"] == make_robot(robot).site
        on_disk = read_progress(small_fleet / f"robot_{robot:04d}.zarr")  # the end's counts came from the tasks
        assert (entry["frames"], entry["failed"]) == (on_disk.frames, len(on_disk.failed_indices))


def test_fleet_store_reads_episodes_and_verifies_clean(small_fleet):
    store = FleetStore.open(small_fleet)
    assert store.robots == [0, 1, 2] and store.num_episodes == 12 and verify_store(store) == []
    episode = store.episode(2, 3)
    length = store.episode_info(2, 3)["length"]
    assert all(len(values) == length for values in episode.values())
    assert episode["next.success"][-1, 0] and not episode["next.success"][0, 0]
    assert store.profile(2) == make_robot(2)
    with pytest.raises(IndexError):
        store.episode(2, 4)


def test_a_store_appears_whole_with_its_first_commit_and_later_commits_append(tmp_path):
    spec, profile = resolve_task("reach"), make_robot(0)
    env, expert = spec.make_env(profile), spec.make_expert(profile)
    features = features_of(env)
    episodes = []
    for index in range(3):
        episode = run_episode(env, expert, episode_seed(0, 0, index), expert.reset, record=True)
        episodes.append(EpisodeRecord(index, episode.seed, episode.success, to_features(episode.frames, features)))
    path = tmp_path / store_name(0)
    with ShardWriter(path, {"task": "reach"}, features) as writer:
        assert not path.exists()  # nothing to see before the first commit
        writer.commit(episodes[:1], [7])
        assert path.exists() and [p.name for p in tmp_path.iterdir() if p.name.endswith(".creating")] == []
        writer.commit(episodes[1:2], [])  # appended in place by the writer that created it
    with ShardWriter(path, {"task": "reach"}, features) as writer:  # and by a new one
        assert writer.done_indices() == {0, 1, 7}
        writer.commit(episodes[2:], [8])
    root = zarr.open_group(path, mode="r")
    assert root.attrs["failed_episodes"] == [7, 8] and root.attrs["schema_version"] == SCHEMA_VERSION
    np.testing.assert_array_equal(root["meta/episode_ends"][:], np.cumsum([e.length for e in episodes]))
    np.testing.assert_array_equal(root["meta/episode_index"][:], [0, 1, 2])
    for name in features:
        np.testing.assert_array_equal(root[f"data/{name}"][:], np.concatenate([e.frames[name] for e in episodes]))
    assert sorted(p.name for p in (path / "data/action").iterdir()) == ["c.0.0", "zarr.json"]  # chunks beside it
    assert sum(p.is_dir() for p in path.rglob("*")) == 2 + len(features) + 5  # data/, meta/, one per array


@pytest.mark.slow
def test_a_concurrent_reader_only_ever_sees_complete_episodes(tmp_path):
    out = tmp_path / "out"
    process = start_collect(out, "--robots", "2", "--episodes", "40", "--workers", "1", "--flush-frames", "30")
    seen_counts, snapshots = set(), []
    wait_for_episodes(out, 1, process)
    while process.poll() is None:
        store = FleetStore.open(out)
        assert verify_store(store) == []
        for robot in store.robots:
            count = store.num_episodes_of(robot)
            if count:
                last = store.episode(robot, count - 1)
                assert len(last["action"]) == store.episode_info(robot, count - 1)["length"]
                assert last["next.success"][-1, 0]  # complete: it ends in success
                snapshots.append((robot, count - 1, last["action"].copy()))
        seen_counts.add(store.num_episodes)
    assert process.returncode == 0, process.stderr.read()
    assert len(seen_counts) >= 3  # the reader really ran during the collection
    final = FleetStore.open(out)
    for robot, index, actions in snapshots:  # what was visible mid-run never changed
        np.testing.assert_array_equal(final.episode(robot, index)["action"], actions)


@pytest.mark.slow
def test_the_progress_bar_counts_every_episode_and_the_summary_follows(tmp_path):
    """Workers send progress at most twice a second per robot, but always a robot's last count.

    Into a pipe (a log) the bar is drawn at the start and the end only, not at every progress
    event. A rerun with every episode already there says so, where a rate would read 0 steps/s."""
    command = collect_command(tmp_path / "fleet", "--robots", "3", "--episodes", "80", "--task", "reach",
                              "--workers", "1")  # a few seconds: several progress events
    command.remove("--quiet")
    completed = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=300)
    assert completed.returncode == 0, completed.stderr
    assert "episodes: 100%" in completed.stderr and " 240/240 " in completed.stderr
    assert completed.stderr.count("episodes: ") == 2, completed.stderr  # 0% and 100%
    assert "3 robots, 240 episodes" in completed.stdout + completed.stderr
    assert "s to set up and shut down dask)" in completed.stdout  # timed apart from the collection
    assert completed.stdout.startswith("dask dashboard: http://127.0.0.1:")
    again = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=300)
    assert again.returncode == 0 and "3 robots, 240 episodes" in again.stdout
    assert "nothing left to collect" in again.stdout and "steps/s" not in again.stdout


@pytest.mark.slow
def test_another_cluster_on_dasks_default_port_leaves_collect_silent(tmp_path):
    """Port 8787, where a dask scheduler serves HTTP by default, held as a second collection running at once holds it."""
    with socket.socket() as other_cluster:
        with contextlib.suppress(OSError):  # already taken by something else: just as good
            other_cluster.bind(("127.0.0.1", 8787))
            other_cluster.listen()
        completed = run_collect(tmp_path / "fleet", "--robots", "1", "--episodes", "2", "--task", "reach")
    assert completed.returncode == 0 and completed.stderr == ""


@pytest.mark.cluster
def test_the_dashboard_link_is_printed_and_serves_dasks_dashboard(capsys):
    """bokeh is installed, so the scheduler serves the dashboard (without it, the page says "Dask needs bokeh")."""
    with dask_client(None, workers=1, show_dashboard=True) as client:
        with urllib.request.urlopen(client.dashboard_link, timeout=60) as response:
            assert response.status == 200 and "Dask Diagnostic UI" in response.read().decode()
    assert client.dashboard_link.endswith("/status")
    assert capsys.readouterr().out == f"dask dashboard: {client.dashboard_link}\n"


@pytest.mark.cluster
def test_a_local_cluster_gives_the_caller_its_environment_back():
    """dask's nannies set their workers' variables (OMP_NUM_THREADS=1, ...) in the process that starts them; a
    training started from that process later inherited them. The workers keep dask's thread settings but not
    its MALLOC_TRIM_THRESHOLD_ (it slows torch), and the caller's environment is as it was."""
    before = dict(os.environ)
    with dask_client(None, workers=1) as client:
        (worker_environ,) = client.run(lambda: dict(os.environ)).values()
    assert dict(os.environ) == before
    assert worker_environ["OMP_NUM_THREADS"] == before.get("OMP_NUM_THREADS", "1")
    assert worker_environ.get("MALLOC_TRIM_THRESHOLD_") == before.get("MALLOC_TRIM_THRESHOLD_")


@pytest.mark.slow
def test_interrupted_then_resumed_equals_uninterrupted(tmp_path):
    arguments = ("--robots", "2", "--episodes", "24", "--workers", "1", "--flush-frames", "60", "--task", "push")
    reference = tmp_path / "reference"
    assert run_collect(reference, *arguments).returncode == 0

    resumed = tmp_path / "resumed"
    process = start_collect(resumed, *arguments)
    wait_for_episodes(resumed, 2, process)
    assert interrupt(process) == 130
    assert "rerun the same command to resume" in process.stderr.read()
    partial = FleetStore.open(resumed)
    assert 0 < partial.num_episodes < 48 and verify_store(partial) == []

    completed = run_collect(resumed, *arguments)
    assert completed.returncode == 0, completed.stderr
    assert_same_stores(reference, resumed)


@pytest.mark.slow
def test_failures_are_counted_not_kept_and_not_retried_on_resume(tmp_path):
    out = tmp_path / "out"
    assert run_collect(out, "--task", "toy_tasks:COIN", "--robots", "2", "--episodes", "10").returncode == 0
    store = FleetStore.open(out)
    for robot in store.robots:
        infos = [store.episode_info(robot, i) for i in range(store.num_episodes_of(robot))]
        assert all(info["success"] and info["seed"] % 2 == 0 for info in infos)
        failed = store.manifest["robots"][str(robot)]["failed"]
        assert failed + len(infos) == 10
        expected_failures = sum(episode_seed(0, robot, i) % 2 for i in range(10))
        assert failed == expected_failures
    before = (out / "robot_0000.zarr/meta/episode_ends/c.0").stat().st_mtime_ns
    assert run_collect(out, "--task", "toy_tasks:COIN", "--robots", "2", "--episodes", "10").returncode == 0
    assert (out / "robot_0000.zarr/meta/episode_ends/c.0").stat().st_mtime_ns == before


@pytest.mark.slow
def test_keep_failures_stores_them_flagged(tmp_path):
    out = tmp_path / "out"
    run_collect(out, "--task", "toy_tasks:COIN", "--robots", "1", "--episodes", "8", "--keep-failures")
    store = FleetStore.open(out)
    infos = [store.episode_info(0, i) for i in range(store.num_episodes_of(0))]
    assert len(infos) == 8
    assert [info["success"] for info in infos] == [info["seed"] % 2 == 0 for info in infos]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--robots", "0"], "--robots must be at least 1"),
        (["--episodes", "-2"], "--episodes must be at least 1"),
        (["--task", "levitate"], "unknown task 'levitate'"),
        (["--cameras", "ceiling"], "unknown camera"),
        (["--workers", "0"], "--workers must be at least 1"),
        (["--seed", "many"], "argument --seed: invalid int value: 'many' (see --help)"),  # argparse's own check
        (["--seed", "-1"], "--seed must not be negative, got -1"),
    ],
)
def test_bad_arguments_fail_with_one_line_and_write_nothing(tmp_path, capsys, arguments, message):
    """collect's main in this process (bad input as users meet it: the refusals below)."""
    out = tmp_path / "out"
    assert exit_code_of(collect_main, ["--out", out, "--quiet", *arguments]) == 2
    assert_one_line(capsys.readouterr().err, message)
    assert not out.exists()


def test_unwritable_out_is_refused(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    completed = run_collect(blocker / "out", "--robots", "1", "--episodes", "1")
    assert completed.returncode == 2
    assert f"--out {blocker / 'out'} lies under {blocker}, which is a file" in completed.stderr


@pytest.mark.slow
def test_a_different_collection_is_refused_without_overwrite(small_fleet, tmp_path):
    before = {p: p.stat().st_mtime_ns for p in small_fleet.rglob("*")}
    completed = run_collect(small_fleet, "--robots", "3", "--episodes", "4", "--task", "push")
    assert completed.returncode != 0
    assert "holds a different collection: its task is 'pick_place', not 'push'" in completed.stderr
    assert {p: p.stat().st_mtime_ns for p in small_fleet.rglob("*")} == before

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    completed = run_collect(foreign, "--robots", "1", "--episodes", "1", "--overwrite")
    assert completed.returncode != 0 and "not a RoboFleet collection" in completed.stderr
    assert (foreign / "notes.txt").exists()


@pytest.mark.slow
def test_overwrite_replaces_a_collection(tmp_path):
    out = tmp_path / "out"
    assert run_collect(out, "--task", "toy_tasks:COIN", "--robots", "2", "--episodes", "2").returncode == 0
    completed = run_collect(out, "--task", "reach", "--robots", "1", "--episodes", "2", "--overwrite")
    assert completed.returncode == 0, completed.stderr
    store = FleetStore.open(out)
    assert store.robots == [0] and store.manifest["task"]["name"] == "reach"


@pytest.mark.slow
def test_camera_images_are_stored_as_compressed_uint8(tmp_path):
    out = tmp_path / "out"
    completed = run_collect(out, "--robots", "1", "--episodes", "2", "--cameras", "front", "front", "--image-size", "32")
    assert completed.returncode == 0, completed.stderr
    # a camera named twice is recorded once, and the same collection as naming it once
    assert run_collect(out, "--robots", "1", "--episodes", "2", "--cameras", "front", "--image-size", "32").returncode == 0
    store = FleetStore.open(out)
    assert store.features["observation.images.front"] == {
        "dtype": "image", "shape": [32, 32, 3], "names": ["height", "width", "channels"]}
    images = store.episode(0, 0)["observation.images.front"]
    assert images.dtype == np.uint8 and images.shape[1:] == (32, 32, 3) and images.std() > 5
    array = zarr.open_group(out / "robot_0000.zarr", mode="r")["data/observation.images.front"]
    assert array.chunks == (32, 32, 32, 3)
    assert type(array.compressors[0]).__name__ == "BloscCodec"


def test_the_writers_inline_store_and_codec_write_the_same_files_as_zarrs_own(tmp_path):
    values = np.arange(3000, dtype=np.float32).reshape(1500, 2)
    for name, store, config in (("threaded", zarr.storage.LocalStore(tmp_path / "threaded"), {}),
                                ("inline", InlineLocalStore(tmp_path / "inline"), WRITER_ZARR_CONFIG)):
        zarr.create_array(store, name="data/x", shape=(0, 2), chunks=(1024, 2), dtype="float32")
        with zarr.config.set(config):  # as the writer does: settings apply to arrays opened under them
            array = zarr.open_array(store, path="data/x", mode="a")
        assert isinstance(array.compressors[0], InlineZstdCodec) == (name == "inline")
        array.append(values)
        array.attrs["written_by"] = "test"
    files = {name: {p.relative_to(tmp_path / name): p.read_bytes()
                    for p in (tmp_path / name).rglob("*") if p.is_file()} for name in ("threaded", "inline")}
    assert files["inline"] == files["threaded"] and len(files["inline"]) == 5  # 3 zarr.json, 2 chunks
    assert type(zarr.open_array(tmp_path / "inline", path="data/x").compressors[0]) is ZstdCodec  # a plain zstd array
    reopened = zarr.open_array(InlineLocalStore(tmp_path / "inline", read_only=True), path="data/x")
    np.testing.assert_array_equal(reopened[:], values)
    assert InlineLocalStore(tmp_path / "inline").get_sync("data/x/c/9/0") is None  # a chunk never written
