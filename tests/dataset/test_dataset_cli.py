"""The ``dataset`` command: info, verify, stats and the LeRobot conversions, run as users run it."""

import json
import shutil
import subprocess
import sys

import pytest

from collect_helpers import REPO, subprocess_env
from dataset import FleetStore
from dataset.cli import main as dataset_main
from fault_helpers import exit_code_of
from sim.fleet import make_robot

pytestmark = pytest.mark.slow


def dataset_command(*arguments) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dataset.cli", *map(str, arguments)], capture_output=True,
                          text=True, env=subprocess_env(), cwd=REPO, timeout=300)


def test_info_reports_per_site_and_per_robot_counts(pick_place_fleet):
    completed = dataset_command("info", pick_place_fleet, "--json")
    assert completed.returncode == 0, completed.stderr
    summary = json.loads(completed.stdout)
    store = FleetStore.open(pick_place_fleet)
    assert summary["task"] == "pick_place" and summary["episodes"] == store.num_episodes == 9
    assert [robot["site"] for robot in summary["robots"]] == [make_robot(r).site for r in range(3)]
    assert sum(site["episodes"] for site in summary["sites"].values()) == 9
    table = dataset_command("info", pick_place_fleet).stdout
    assert "site" in table and make_robot(0).site in table


def test_verify_exits_zero_when_clean_and_one_naming_the_shard_when_corrupt(pick_place_fleet, tmp_path):
    clean = dataset_command("verify", pick_place_fleet)
    assert clean.returncode == 0 and "OK" in clean.stdout, clean.stderr
    broken = tmp_path / "fleet"
    shutil.copytree(pick_place_fleet, broken)
    shutil.rmtree(broken / "robot_0002.zarr")
    completed = dataset_command("verify", broken)
    assert completed.returncode == 1
    assert "robot_0002" in completed.stdout
    assert completed.stderr.strip().splitlines()[-1].startswith("error: 1 problem")  # after the progress bar
    shown = dataset_command("info", broken)  # a missing robot does not look normal
    assert "missing" in shown.stdout.splitlines()[-1] and "robot 2 missing" in shown.stderr, shown


def test_stats_prints_every_dimension(pick_place_fleet, tmp_path):
    path = tmp_path / "fleet"
    shutil.copytree(pick_place_fleet, path)
    completed = dataset_command("stats", path, "--json")
    assert completed.returncode == 0, completed.stderr
    stats = json.loads(completed.stdout)
    assert len(stats["observation.state"]["q99"]) == 20
    assert "action[4]" in dataset_command("stats", path).stdout


def test_export_then_import_through_the_command_line(camera_fleet, tmp_path):
    exported, imported = tmp_path / "lerobot", tmp_path / "imported"
    completed = dataset_command("export-lerobot", camera_fleet, exported)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert not (exported / "images").exists()  # the frames are in the parquet files: no empty folders beside
    completed = dataset_command("import-lerobot", exported, imported)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert dataset_command("verify", imported).returncode == 0
    assert FleetStore.open(imported).num_frames == FleetStore.open(camera_fleet).num_frames
    again = dataset_command("export-lerobot", camera_fleet, exported)
    assert again.returncode == 2 and "exists" in again.stderr
    usage = dataset_command("export-lerobot", "--help").stdout
    assert "(default: None)" not in usage and "(default: robofleet/<store name>)" in usage


def test_export_writes_a_robots_observations_and_the_privileged_state_only_on_request(camera_fleet, tmp_path):
    """lerobot-train feeds a policy every feature of a dataset: the default export of a camera store must not
    hold observation.environment_state."""
    def exported_features(*options) -> set[str]:
        root = tmp_path / "-".join(["export", *options])
        completed = dataset_command("export-lerobot", camera_fleet, root, *options)
        assert completed.returncode == 0, completed.stderr[-2000:]
        inputs = json.loads((root / "meta" / "robofleet.json").read_text())["inputs"]
        assert completed.stdout.strip().endswith(f"(observations: --inputs {inputs})")
        return inputs, set(json.loads((root / "meta" / "info.json").read_text())["features"])

    front, privileged = "observation.images.front", "observation.environment_state"
    inputs, features = exported_features()
    assert inputs == "proprio+cameras" and privileged not in features
    assert {"observation.state", front, "action", "next.success"} <= features
    inputs, features = exported_features("--inputs", "state+cameras")
    assert inputs == "state+cameras" and {"observation.state", privileged, front} <= features
    inputs, features = exported_features("--inputs", "state")
    assert privileged in features and front not in features
    completed = dataset_command("export-lerobot", camera_fleet, tmp_path / "bad", "--inputs", "pixels")
    assert completed.returncode == 2 and completed.stderr.strip().count("\n") == 0
    assert "--inputs must be one of state, proprio+cameras, cameras, state+cameras" in completed.stderr
    assert not (tmp_path / "bad").exists()


def test_export_features_lists_the_observations_by_name(camera_fleet, tmp_path, capsys):
    """--features: an explicit list instead of --inputs, recorded as the inputs; a feature the store lacks, an
    observation the store has not got, or both options are one line, exit 2, nothing written."""
    root = tmp_path / "front_only"
    completed = dataset_command("export-lerobot", camera_fleet, root, "--features", "observation.images.front",
                                "observation.state")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip().endswith("(observations: --features observation.images.front observation.state)")
    sidecar = json.loads((root / "meta" / "robofleet.json").read_text())
    assert sidecar["inputs"] == "observation.images.front+observation.state"
    features = set(json.loads((root / "meta" / "info.json").read_text())["features"])
    assert {"observation.state", "observation.images.front", "action", "next.success"} <= features
    assert "observation.environment_state" not in features
    for options, message in ((["--features", "observation.images.top"],
                              "unknown feature 'observation.images.top' for --features; the store's observations are "
                              "observation.state, observation.environment_state, observation.images.front"),
                             (["--features", "action"], "unknown feature 'action'"),
                             (["--inputs", "state", "--features", "observation.state"],
                              "--inputs and --features are alternatives: give one of them")):
        with pytest.raises(SystemExit) as exited:  # in-process: the command line ran above
            dataset_main(["export-lerobot", str(camera_fleet), str(tmp_path / "bad"), *options])
        error = capsys.readouterr().err
        assert exited.value.code == 2 and message in error and error.strip().count("\n") == 0, error
        assert not (tmp_path / "bad").exists()


def test_bad_input_is_one_line_and_exit_two(pick_place_fleet, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    one_robot = next(pick_place_fleet.glob("robot_*.zarr"))
    for arguments, message in ((["info", tmp_path / "nothing"], "no fleet store"),
                               (["stats", tmp_path / "nothing"], "no fleet store"),
                               (["verify", tmp_path / "no"], "no fleet store"),
                               (["verify", pick_place_fleet, "--repair"],  # repair recollects: collect's
                                f"`dataset verify --repair` moved to collect: run `collect --repair {pick_place_fleet}`"),
                               (["info", tmp_path / "empty"], "neither manifest.json nor robot_NNNN.zarr stores"),
                               (["info", one_robot], f"is a zarr store, not a fleet store: open the directory "
                                                     f"that holds the robot_NNNN.zarr stores and manifest.json "
                                                     f"({pick_place_fleet}?)")):
        assert exit_code_of(dataset_main, arguments) == 2  # in-process: the command line runs below and above
        error = capsys.readouterr().err
        assert error.startswith("error:") and message in error and error.strip().count("\n") == 0, error
    assert dataset_command("frobnicate").returncode == 2


def test_piped_output_closes_quietly(pick_place_fleet):
    """A reader that closes the pipe early (head, true) ends the command without a traceback."""
    for pipe in ("verify {} | head -1", "verify {} | true", "info {} | true"):
        completed = subprocess.run(f"{sys.executable} -m dataset.cli {pipe.format(pick_place_fleet)}", shell=True,
                                   capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=300)
        assert "Traceback" not in completed.stderr and "BrokenPipeError" not in completed.stderr, completed.stderr
