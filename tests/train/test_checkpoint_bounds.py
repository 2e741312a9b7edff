"""Checkpoints are read bounded: what a hostile user hands us in place of a checkpoint's files is
refused in one line, before it is read or built.

A symlink to /dev/zero (read until memory runs out), a FIFO (blocks its reader for ever), a link
out of the run, a file whose size differs from the one recorded, a policy spec of gigabytes, and
malformed old files for the conversion. The checkpoints are made in this process (a tiny mlp on
made-up features): nothing is collected or trained.
"""

import json
import os
import resource
import shutil

import numpy as np
import pytest
import torch

from core.errors import one_line
from eval.cli import main as evaluate_main
from fault_helpers import assert_one_line, exit_code_of
from train import checkpoint as checkpoint_module
from train.checkpoint import (DESCRIPTION, TRAINING_STATE, WEIGHTS, Checkpoint, checkpoint_dir, latest_checkpoint,
                              load_policy, open_checkpoint)
from train.convert_checkpoint import convert
from train.convert_checkpoint import main as convert_main
from train.policies.budget import check_policy
from train.policies.policy import PolicySpec, make_policy

SPEC = PolicySpec(features={"observation.state": [4]}, action_dim=2, hidden=(8, 8))
STATS = {"observation.state": {"mean": np.zeros(4, np.float32), "std": np.ones(4, np.float32)},
         "action": {"mean": np.zeros(2, np.float32), "std": np.ones(2, np.float32)}}
HUGE = (25000, 25000)  # 625 million parameters: 2.5 GB were it built


def tiny_checkpoint(step: int = 1) -> Checkpoint:
    torch.manual_seed(0)
    return Checkpoint(spec=SPEC, weights=make_policy(SPEC, STATS).state_dict(), stats=STATS, features={}, step=step,
                      task={"name": "reach"}, training={"optimizer": {"state": {}, "param_groups": []}})


@pytest.fixture
def run(tmp_path):
    """A run with two tiny checkpoints (steps 1 and 2), ``last`` pointing at step 2."""
    run = tmp_path / "run"
    for step in (1, 2):
        tiny_checkpoint(step).save(run)
    return run


def replace(path, make) -> None:
    """Put what ``make(path)`` creates in place of the file ``path``."""
    path.unlink()
    make(path)


def test_an_intact_run_reads_through_last_and_its_files_record_their_sizes(run):
    last = latest_checkpoint(run)
    description = json.loads((last / DESCRIPTION).read_text())
    assert description["files"][WEIGHTS]["bytes"] == (last / WEIGHTS).stat().st_size
    for given in (run, checkpoint_dir(run) / "last", last):
        assert open_checkpoint(given, training=True).step == 2
    policy, _ = load_policy(checkpoint_dir(run) / "last")
    assert sum(p.numel() for p in policy.parameters()) > 0


def test_an_older_description_without_sizes_still_reads(run):
    last = latest_checkpoint(run)
    description = json.loads((last / DESCRIPTION).read_text())
    description["files"] = {name: record["sha256"] for name, record in description["files"].items()}
    (last / DESCRIPTION).write_text(json.dumps(description))
    assert open_checkpoint(last, training=True).step == 2


@pytest.mark.parametrize("name", [WEIGHTS, TRAINING_STATE])
def test_a_file_linked_to_dev_zero_is_refused(run, name):
    last = latest_checkpoint(run)
    replace(last / name, lambda path: path.symlink_to("/dev/zero"))
    with pytest.raises(ValueError, match=f"{name} links to /dev/zero, outside {run}: refused"):
        open_checkpoint(last, training=True)


def test_evaluate_refuses_a_weights_file_linked_to_dev_zero_in_one_line(run, tmp_path, capsys):
    replace(latest_checkpoint(run) / WEIGHTS, lambda path: path.symlink_to("/dev/zero"))
    code = exit_code_of(evaluate_main, ["--checkpoint", latest_checkpoint(run), "--out", tmp_path / "eval"])
    assert code == 2
    assert_one_line(capsys.readouterr().err, "error:", "links to /dev/zero")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", [WEIGHTS, TRAINING_STATE, DESCRIPTION])
def test_a_fifo_in_place_of_a_file_is_refused_at_once(run, name):
    last = latest_checkpoint(run)
    replace(last / name, os.mkfifo)
    refusal = "is not a RoboFleet checkpoint" if name == DESCRIPTION else f"{name} is a FIFO, not a regular file"
    with pytest.raises(ValueError, match=refusal):
        open_checkpoint(last, training=True)


def test_a_link_out_of_the_run_is_refused_and_one_inside_it_is_not(run, tmp_path):
    last = latest_checkpoint(run)
    for where in (run / "shared", tmp_path / "elsewhere"):
        where.mkdir()
        shutil.copy(last / WEIGHTS, where / WEIGHTS)
    replace(last / WEIGHTS, lambda path: path.symlink_to(run / "shared" / WEIGHTS))
    assert open_checkpoint(last).step == 2
    replace(last / WEIGHTS, lambda path: path.symlink_to(tmp_path / "elsewhere" / WEIGHTS))
    with pytest.raises(ValueError, match=f"outside {run}: refused"):
        open_checkpoint(last)


def test_a_file_of_another_size_than_recorded_is_refused_before_it_is_read(run):
    last = latest_checkpoint(run)
    size = (last / WEIGHTS).stat().st_size
    with open(last / WEIGHTS, "ab") as file:
        file.write(b"\0" * 4096)
    with pytest.raises(ValueError, match=f"{WEIGHTS} is damaged: it holds {size + 4096:,} bytes, not the {size:,}"):
        open_checkpoint(last)


def test_a_description_over_the_cap_is_refused_before_parsing(run, monkeypatch):
    monkeypatch.setattr(checkpoint_module, "MAX_DESCRIPTION", 100)
    with pytest.raises(ValueError, match=f"{DESCRIPTION} holds .* bytes, more than the 100 such a file may"):
        open_checkpoint(latest_checkpoint(run))


def test_an_oversized_spec_is_refused_without_building_it(run, tmp_path, capsys):
    last = latest_checkpoint(run)
    description = json.loads((last / DESCRIPTION).read_text())
    description["policy_spec"]["hidden"] = list(HUGE)
    (last / DESCRIPTION).write_text(json.dumps(description))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    checkpoint = open_checkpoint(last)
    with pytest.raises(ValueError, match="its weights do not fit its mlp policy: size mismatch for net.0.weight"):
        checkpoint.policy()
    with pytest.raises(ValueError, match="its mlp policy would have more than 100,000,000 parameters .*: refused"):
        check_policy(checkpoint.spec, checkpoint.stats, {}, max_parameters=10**8)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500 * 1024
    code = exit_code_of(evaluate_main, ["--checkpoint", checkpoint_dir(run) / "step_00000001",
                                        "--max-parameters", "10", "--out", tmp_path / "eval"])
    assert code == 2
    assert_one_line(capsys.readouterr().err, "error:", "would have more than 10 parameters", "--max-parameters")


def old_run(tmp_path, content) -> object:
    """A run whose one checkpoint is ``content`` in the old single-file format."""
    run = tmp_path / "old"
    checkpoint_dir(run).mkdir(parents=True)
    torch.save(content, checkpoint_dir(run) / "step_00000001.pt")
    return run


def old_content() -> dict:
    checkpoint = tiny_checkpoint()
    return {"policy_spec": checkpoint.spec.to_dict(), "model": checkpoint.weights, "stats": checkpoint.stats,
            "features": {}, "step": 1}


@pytest.mark.parametrize("change, refusal", [
    (lambda content: [1, 2], "it is not a RoboFleet checkpoint"),
    (lambda content: {key: value for key, value in content.items() if key != "model"}, "not a RoboFleet checkpoint"),
    (lambda content: {**content, "model": "weights"}, "not a RoboFleet checkpoint (ValueError: dictionary update"),
    (lambda content: {**content, "policy_spec": 3}, "not a RoboFleet checkpoint (AttributeError"),
    (lambda content: {**content, "policy_spec": {**content["policy_spec"], "depth": 3}}, "unexpected keyword"),
    (lambda content: {**content, "personal": [1]}, "not a RoboFleet checkpoint (AttributeError"),
    (lambda content: {**content, "step": "one"}, "its step is missing or of the wrong type"),
    (lambda content: {**content, "stats": {"action": STATS["action"]}}, "policy does not build: KeyError"),
    (lambda content: {**content, "policy_spec": {**content["policy_spec"], "hidden": list(HUGE)}},
     "its weights do not fit its mlp policy"),
], ids=["not a dict", "no model", "model a string", "spec a number", "spec of unknown fields", "personal a list",
        "step a string", "stats lacking an input", "hidden widths that do not fit"])
def test_a_malformed_old_checkpoint_is_refused_in_one_line_and_nothing_written(tmp_path, change, refusal):
    run = old_run(tmp_path, change(old_content()))
    with pytest.raises(ValueError, match="cannot convert .*step_00000001.pt") as raised:
        convert(run)
    assert refusal in str(raised.value) and "\n" not in str(raised.value)
    assert [path.name for path in checkpoint_dir(run).iterdir()] == ["step_00000001.pt"]  # nothing written


def test_the_conversion_command_refuses_a_malformed_old_checkpoint_with_exit_2(tmp_path, capsys):
    run = old_run(tmp_path, {**old_content(), "model": [torch.zeros(3)]})
    assert exit_code_of(convert_main, [run]) == 2
    assert_one_line(capsys.readouterr().err, "error: cannot convert", "not a RoboFleet checkpoint")
    assert [path.name for path in checkpoint_dir(run).iterdir()] == ["step_00000001.pt"]


@pytest.mark.timeout(30)
def test_the_conversion_refuses_a_fifo_and_a_link_to_dev_zero(tmp_path):
    run = old_run(tmp_path, old_content())
    file = checkpoint_dir(run) / "step_00000001.pt"
    replace(file, os.mkfifo)
    with pytest.raises(ValueError, match="is a FIFO, not a regular file"):
        convert(run)
    replace(file, lambda path: path.symlink_to("/dev/zero"))
    with pytest.raises(ValueError, match="links to /dev/zero, outside"):
        convert(file)


def test_one_line_cuts_a_long_message_at_a_word_boundary():
    error = ValueError("the checkpoint was refused: load it with `weights_only=True` " * 10)
    line, whole = one_line(error, limit=120), f"ValueError: {str(error).strip()}"
    kept = line.removesuffix("...")
    assert len(line) <= 120 and line.endswith("...") and whole.startswith(kept)
    assert whole[len(kept)] in " ,;:"  # cut between words, not inside one
    assert one_line(ValueError("short\nsecond line")) == "ValueError: short"
    assert one_line(ValueError("x" * 300), limit=50) == "ValueError: " + "x" * 35 + "..."
