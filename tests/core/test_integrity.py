"""Damaged inputs: broken checkpoints, missing robot stores, a corrupt manifest, an --out that is a file.

Each is worked around with a one-line warning or stops with a one-line error (exit 2),
never a traceback and never a silent run on the wrong data. Commands that stop before
training or evaluating run in this process; the others run as users run them.
"""

import json
import os
import shutil

import pytest

from collect.cli import main as collect_main
from core.files import REPO
from dataset.cli import main as dataset_main
from eval.cli import main as evaluate_main
from train.bc import main as bc_main
from train.checkpoint import checkpoint_dir, open_checkpoint
from train.distill import main as distill_main
from train.federated import main as federated_main
from fault_helpers import assert_one_line, exit_code_of, flip_byte, truncate
from train_helpers import QUICK, train

TRAINING = ((bc_main, QUICK), (federated_main, []))  # each training command's main, with options for a tiny fleet


@pytest.fixture
def fleet(pick_place_fleet, tmp_path):
    """A copy of the pick-place fleet, to damage."""
    return shutil.copytree(pick_place_fleet, tmp_path / "fleet")


def step_file(run, step: int):
    """The weights file of the checkpoint of ``step``."""
    return checkpoint_dir(run) / f"step_{step:08d}" / "model.safetensors"


# ----- checkpoints ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_training_skips_a_truncated_newest_checkpoint_with_one_warning_and_resumes_from_the_one_before(
        pick_place_fleet, run_copy):
    truncate(step_file(run_copy, 20))
    completed = train("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "30")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "resumed from step 10" in completed.stdout
    assert completed.stderr.startswith("warning: skipped a broken checkpoint: ")
    assert_one_line(completed.stderr, f"{step_file(run_copy, 20)} is damaged: it holds")  # fewer bytes than recorded
    assert open_checkpoint(run_copy).step == 30


@pytest.mark.slow
def test_with_every_checkpoint_broken_training_stops_with_one_line(pick_place_fleet, run_copy, capsys):
    truncate(step_file(run_copy, 20))
    step_file(run_copy, 10).write_bytes(b"not a zip")
    message = (f"error: no intact checkpoint in {checkpoint_dir(run_copy)}: all 2 are broken; "
               f"the newest: {step_file(run_copy, 20)}")
    for main, options in TRAINING:
        assert exit_code_of(main, ["--data", pick_place_fleet, "--out", run_copy, *options]) == 2
        assert_one_line(capsys.readouterr().err, message, "--no-resume starts afresh")


@pytest.mark.slow
def test_evaluate_on_a_run_directory_falls_back_to_its_newest_intact_checkpoint(run_copy, tmp_path, capsys):
    truncate(step_file(run_copy, 20))
    out = tmp_path / "eval"
    evaluate_main(["--checkpoint", str(run_copy), "--robots", "1", "--episodes", "1", "--workers", "1",
                   "--out", str(out), "--quiet"])
    assert json.loads((out / "eval_info.json").read_text())["checkpoint"]["step"] == 10
    warning = capsys.readouterr().err
    assert warning.startswith("warning: skipped a broken checkpoint: ")
    assert_one_line(warning, f"{step_file(run_copy, 20)} is damaged")


# ----- collections --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_missing_robot_store_stops_training_unless_allowed(fleet, tmp_path, capsys):
    shutil.rmtree(fleet / "robot_0001.zarr")
    message = f"1 robot store(s) listed in {fleet / 'manifest.json'} are missing: robot_0001.zarr"
    for main, options in TRAINING:
        assert exit_code_of(main, ["--data", fleet, "--out", tmp_path / "stopped", *options]) == 2
        assert_one_line(capsys.readouterr().err, f"error: {message}; rerun the collect command",
                        "--allow-missing-robots")

    allowed = train("--data", fleet, "--out", tmp_path / "allowed", "--max-steps", "10", "--allow-missing-robots")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert_one_line(allowed.stderr, f"warning: {message}; training on the other 2 (--allow-missing-robots)")
    assert open_checkpoint(tmp_path / "allowed").step == 10


@pytest.mark.slow
def test_a_corrupt_manifest_is_one_line_naming_it_in_every_command(fleet, trained_run, tmp_path, capsys):
    manifest = fleet / "manifest.json"
    manifest.write_text(manifest.read_text()[:-20])  # cut short, as a bad copy leaves it
    message = f"error: {manifest} is corrupt, not JSON"
    for subcommand in (["info"], ["verify"], ["stats"], ["export-lerobot", tmp_path / "lerobot"]):
        assert exit_code_of(dataset_main, [subcommand[0], fleet, *subcommand[1:]]) == 2
        assert_one_line(capsys.readouterr().err, message)
    collect_again = ["--out", fleet, "--robots", "3", "--episodes", "3", "--task", "pick_place", "--quiet"]
    assert exit_code_of(collect_main, collect_again) == 2
    assert_one_line(capsys.readouterr().err, message)
    for main, options in TRAINING:
        assert exit_code_of(main, ["--data", fleet, "--out", tmp_path / "run", *options]) == 2
        assert_one_line(capsys.readouterr().err, message)

    # evaluate reads the training collection's manifest (its fleet seed, the seeds trained on)
    checkpoint = open_checkpoint(trained_run)
    checkpoint.data = str(fleet)
    checkpoint.write(tmp_path / "checkpoint")
    assert exit_code_of(evaluate_main, ["--checkpoint", tmp_path / "checkpoint", "--out", tmp_path / "eval"]) == 2
    assert_one_line(capsys.readouterr().err, message)


@pytest.mark.parametrize("damage, message", [
    (lambda manifest: {}, "is not a RoboFleet manifest: it lacks task, fps, seed, features, robots"),
    (lambda manifest: [manifest], "is not a RoboFleet manifest: it holds a JSON list, not an object"),
    (lambda manifest: {key: value for key, value in manifest.items() if key != "seed"}, "is not a RoboFleet manifest: it lacks seed"),
    (lambda manifest: {**manifest, "robots": ["0", "1", "2"]}, "is damaged: its robots is a JSON list"),
], ids=["empty", "a list", "without seed", "robots a list"])
def test_a_manifest_that_is_json_but_not_a_manifest_is_one_line_in_every_command(fleet, tmp_path, capsys, damage,
                                                                                   message):
    manifest = fleet / "manifest.json"
    manifest.write_text(json.dumps(damage(json.loads(manifest.read_text()))))
    for subcommand in (["verify"], ["info"], ["stats"], ["export-lerobot", tmp_path / "lerobot"]):
        assert exit_code_of(dataset_main, [subcommand[0], fleet, *subcommand[1:]]) == 2
        assert_one_line(capsys.readouterr().err, f"error: {manifest} {message}")
    assert not (tmp_path / "lerobot").exists()
    collect_again = ["--out", fleet, "--robots", "3", "--episodes", "3", "--task", "pick_place", "--quiet"]
    assert exit_code_of(collect_main, collect_again) == 2
    assert_one_line(capsys.readouterr().err, f"error: {manifest} {message}")
    for main, options in TRAINING:
        assert exit_code_of(main, ["--data", fleet, "--out", tmp_path / "run", *options]) == 2
        assert_one_line(capsys.readouterr().err, f"error: {manifest} {message}")
        assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_evaluate_stops_when_the_training_collections_episode_ends_are_damaged(fleet, trained_run, tmp_path, capsys,
                                                                                monkeypatch):
    flip_byte(fleet / "robot_0001.zarr" / "meta" / "episode_ends" / "c.0")
    checkpoint = open_checkpoint(trained_run)
    # its held-out seeds are checked against this robot's training seeds; a checkpoint records the collection
    # relative to the repository, and evaluate finds it from any directory
    checkpoint.data = os.path.relpath(fleet, REPO)
    monkeypatch.chdir(tmp_path)
    checkpoint.write(tmp_path / "checkpoint")
    assert exit_code_of(evaluate_main, ["--checkpoint", tmp_path / "checkpoint", "--out", tmp_path / "eval"]) == 2
    assert_one_line(capsys.readouterr().err, "robot_0001.zarr: meta/episode_ends is damaged",
                    f"collect --repair {fleet}")


def test_an_out_that_is_a_file_or_lies_under_one_is_one_line_in_every_command(pick_place_fleet, tmp_path, capsys):
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    commands = [(main, ["--data", pick_place_fleet, *options], "--out") for main, options in TRAINING] + [
        (distill_main, ["--data", pick_place_fleet, "--teacher", tmp_path / "teacher"], "--out"),
        (collect_main, ["--robots", "1", "--episodes", "1", "--quiet"], "--out"),
        (evaluate_main, ["--expert", "--task", "reach", "--quiet"], "--out"),
        (dataset_main, ["export-lerobot", pick_place_fleet], "ROOT"),
        (dataset_main, ["import-lerobot", tmp_path / "lerobot"], "OUT")]
    for out, where in ((file, "is a file"), (file / "sub", f"lies under {file}, which is a file")):
        for main, arguments, name in commands:
            placed = [*arguments, out] if name != "--out" else [*arguments, "--out", out]
            assert exit_code_of(main, placed) == 2, (main, placed)
            assert_one_line(capsys.readouterr().err, f"error: {name} {out} {where}, not a directory")
    assert file.read_text() == "mine" and not list(tmp_path.glob(".notes*"))
