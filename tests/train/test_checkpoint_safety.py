"""Checkpoints are untrusted input: loading one never runs code from it, damage is caught, old ones convert.

The attack: a pickle whose ``__reduce__`` calls ``os.system``, the way a checkpoint made by
``torch.save`` of a crafted object runs code in ``torch.load(weights_only=False)``. It is
handed to every loader a user reaches (evaluate, train.export, distill.py's teacher, a
resume of bc.py and federated.py, the conversion command, ``load_policy`` as DAgger's
workers use it), both as an old single-file checkpoint and hidden in a current
checkpoint's resume state with a matching checksum. Each refuses it in one line, and
the marker file the payload would write never appears.
"""

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

from collect_helpers import REPO, subprocess_env
from train.checkpoint import TRAINING_STATE, checkpoint_dir, latest_checkpoint, load_policy, open_checkpoint
from train.convert_checkpoint import convert
from train_helpers import QUICK, train

pytestmark = pytest.mark.slow


class Payload:
    """Unpickling this runs a shell command that writes ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"echo PWNED > {self.marker}",)


def old_format_content(checkpoint) -> dict:
    """A checkpoint's content in the old single-file layout."""
    return {"policy_spec": checkpoint.spec.to_dict(), "model": checkpoint.weights, "stats": checkpoint.stats,
            "features": checkpoint.features, "task": checkpoint.task, "step": checkpoint.step,
            "epoch": checkpoint.epoch,
            "config": checkpoint.config, "data": checkpoint.data, "code_version": checkpoint.code_version,
            **checkpoint.training}


def old_run(tmp_path, content: dict):
    """A run directory whose only checkpoint is ``content`` in the old pickle format."""
    run = tmp_path / "old_run"
    checkpoint_dir(run).mkdir(parents=True)
    name = f"step_{content['step']:08d}.pt"
    torch.save(content, checkpoint_dir(run) / name)
    (checkpoint_dir(run) / "last").symlink_to(name)
    return run


def run(*command, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, command)], capture_output=True, text=True, cwd=cwd,
                          env=subprocess_env(), timeout=300)


def assert_refused_in_one_line(completed: subprocess.CompletedProcess, marker, *fragments: str) -> None:
    assert completed.returncode != 0, completed.stdout[-2000:]
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in completed.stderr, completed.stderr[-3000:]
    assert all(fragment in lines[0] for fragment in fragments), lines[0]
    assert not marker.exists(), "the checkpoint's code ran"


def test_an_old_pickle_checkpoint_runs_no_code_in_any_loader(trained_run, pick_place_fleet, tmp_path):
    marker = tmp_path / "pwned"
    malicious = {**old_format_content(open_checkpoint(trained_run, training=True)), "policy_spec": Payload(marker)}
    old = old_run(tmp_path, malicious)
    file = checkpoint_dir(old) / "step_00000020.pt"
    pointer = "python -m train.convert_checkpoint"
    for given in (old, file):
        assert_refused_in_one_line(run("-m", "eval.cli", "--checkpoint", given, "--out", tmp_path / "eval"), marker,
                                   "old pickle format", pointer)
    assert_refused_in_one_line(run("-m", "train.export", old, tmp_path / "exported"), marker, pointer)
    assert_refused_in_one_line(run(REPO / "train" / "distill.py", *QUICK, "--teacher", old, "--data", pick_place_fleet,
                                   "--out", tmp_path / "student"), marker, pointer)
    assert_refused_in_one_line(run(REPO / "train" / "bc.py", *QUICK, "--data", pick_place_fleet, "--out", old),
                               marker, pointer)
    assert_refused_in_one_line(run(REPO / "train" / "federated.py", "--data", pick_place_fleet, "--out", old),
                               marker, pointer)
    # the conversion itself loads with weights_only: it refuses the payload rather than running it
    assert_refused_in_one_line(run("-m", "train.convert_checkpoint", old), marker,
                               "cannot convert", "system, which no checkpoint holds")
    with pytest.raises(ValueError, match="old pickle format"):
        load_policy(old)  # as DAgger's and evaluate's workers load
    assert file.exists() and not marker.exists()


def test_code_hidden_in_the_resume_state_does_not_run(run_copy, pick_place_fleet, tmp_path):
    """An attacker can also write a current checkpoint and fix its checksums: the resume state is
    still read with weights_only (the resume skips it as broken), and evaluation reads only
    the safetensors weights."""
    marker = tmp_path / "pwned"
    last = latest_checkpoint(run_copy)
    torch.save({"optimizer": Payload(marker)}, last / TRAINING_STATE)
    description = json.loads((last / "checkpoint.json").read_text())
    description["files"][TRAINING_STATE] = hashlib.sha256((last / TRAINING_STATE).read_bytes()).hexdigest()
    (last / "checkpoint.json").write_text(json.dumps(description))

    policy, checkpoint = load_policy(run_copy)  # evaluation never opens the resume state
    assert checkpoint.step == 20 and not marker.exists()
    resumed = train("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "20")
    assert resumed.returncode == 0 and "resumed from step 10" in resumed.stdout, resumed.stderr[-3000:]
    assert f"skipped a broken checkpoint: cannot read {last / TRAINING_STATE}: UnpicklingError: Weights only load " \
           "failed" in resumed.stderr
    assert not marker.exists()


def test_flipped_weights_are_detected_and_refused(run_copy, tmp_path):
    weights = latest_checkpoint(run_copy) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01  # one bit of one weight: the file still parses
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="model.safetensors is damaged: its sha256 does not match"):
        open_checkpoint(latest_checkpoint(run_copy))
    completed = run("-m", "eval.cli", "--checkpoint", latest_checkpoint(run_copy), "--out", tmp_path / "eval")
    assert completed.returncode == 2 and "is damaged" in completed.stderr


def test_a_description_naming_other_data_wrongly_is_refused(run_copy):
    last = latest_checkpoint(run_copy)
    description = json.loads((last / "checkpoint.json").read_text())
    assert description["more_data"] == []  # bc.py on one store: no other data
    (last / "checkpoint.json").write_text(json.dumps({**description, "more_data": {"path": "x"}}))
    with pytest.raises(ValueError, match="checkpoint.json is damaged: its more_data is not a list of paths"):
        open_checkpoint(last)


def test_an_old_checkpoint_converts_to_the_same_policy_and_resumes(trained_run, pick_place_fleet, tmp_path):
    original = open_checkpoint(trained_run, training=True)
    content = old_format_content(original)
    numpy_state = content["rng"]["numpy"]
    content["rng"] = {**content["rng"], "numpy": (numpy_state[0], torch.tensor(numpy_state[1]).numpy().astype("uint32"),
                                                  *numpy_state[2:])}  # the old files kept numpy's own state
    old = old_run(tmp_path, content)
    convert(old)
    converted = open_checkpoint(old, training=True)
    assert not list(checkpoint_dir(old).glob("*.pt")) and latest_checkpoint(old).name == "step_00000020"
    assert converted.spec == original.spec and converted.step == 20
    assert all(torch.equal(converted.weights[key], value) for key, value in original.weights.items())
    assert converted.training["rng"]["numpy"] == original.training["rng"]["numpy"]
    resumed = train("--data", pick_place_fleet, "--out", old, "--max-steps", "30")
    assert resumed.returncode == 0 and "resumed from step 20" in resumed.stdout, resumed.stderr[-3000:]
    assert "does not record what it was trained on" in resumed.stderr
    assert open_checkpoint(old).step == 30
