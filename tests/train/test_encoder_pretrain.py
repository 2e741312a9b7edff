"""Camera encoders pretrained by inverse dynamics (train/encoder_pretrain.py) learn, start a cnn through bc.py's
--init-encoders, and are untrusted input: damaged, foreign or code-carrying files are refused in one line."""

import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from collect_helpers import REPO
from core.errors import CRASH_AT
from dataset import FleetStore
from dataset.stats import fleet_stats
from train.encoder_pretrain import (DESCRIPTION, RESUME, WEIGHTS, EncoderPretrainConfig, load_encoders, pairs_of,
                                    pretrain, read_resume_state)
from train.policies.options import PolicyOptions
from train.policies.policy import make_policy, policy_spec
from train_helpers import train, train_env


@pytest.fixture(scope="module")
def encoders(camera_fleet, tmp_path_factory):
    """Encoders pretrained for 60 steps on the camera fleet. Read-only."""
    out = tmp_path_factory.mktemp("encoders") / "encoders"
    description = pretrain(EncoderPretrainConfig(data=str(camera_fleet), out=str(out), gap=2, steps=60,
                                                 batch_size=16))
    return out, description


def fresh_cnn(store_path):
    store = FleetStore.open(store_path)
    return make_policy(policy_spec(PolicyOptions(policy="cnn"), store.features), fleet_stats(store))


def test_inverse_dynamics_learns_and_its_encoders_start_a_cnn(camera_fleet, encoders):
    out, description = encoders
    assert description["loss_last"] < description["loss_first"]
    assert description["cameras"] == ["observation.images.front"] and description["gap"] == 2
    policy = fresh_cnn(camera_fleet)
    load_encoders(policy, out)
    for key, value in load_file(out / WEIGHTS).items():
        assert torch.equal(policy.encoders.state_dict()[key], value), key


@pytest.mark.slow
def test_bc_py_starts_from_pretrained_encoders_and_records_them(camera_fleet, encoders, tmp_path):
    out, _ = encoders
    run = tmp_path / "run"
    completed = train("--data", camera_fleet, "--out", run, "--policy", "cnn", "--init-encoders", out,
                      "--max-steps", "2", "--batch-size", "16", "--val-fraction", "0")
    assert completed.returncode == 0, completed.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())["config"]
    assert config["init_encoders"] == str(out)
    carried_on = train("--data", camera_fleet, "--out", run, "--policy", "cnn", "--init-encoders", out.parent / "gone",
                       "--max-steps", "3", "--batch-size", "16", "--val-fraction", "0")
    assert carried_on.returncode == 0, carried_on.stderr[-3000:]  # a resume carries on its own weights
    assert "resumed from step 2" in carried_on.stdout
    refused = train("--data", camera_fleet, "--out", tmp_path / "mlp", "--policy", "mlp", "--init-encoders", out,
                    "--max-steps", "2")
    assert refused.returncode != 0 and "--init-encoders starts a cnn's camera encoders" in refused.stderr
    assert not (tmp_path / "mlp" / "checkpoints").exists()


class Payload:
    """Unpickling this runs a shell command that writes ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"echo PWNED > {self.marker}",)


def rewritten(encoders_dir, tmp_path, weights: bytes | None = None, **fields):
    """A copy of ``encoders_dir`` with other weights (their sha256 recorded to match) or description fields."""
    copy = shutil.copytree(encoders_dir, tmp_path / "copy")
    description = json.loads((copy / DESCRIPTION).read_text())
    if weights is not None:
        (copy / WEIGHTS).write_bytes(weights)
        description["sha256"] = hashlib.sha256(weights).hexdigest()
    (copy / DESCRIPTION).write_text(json.dumps({**description, **fields}))
    return copy


def test_damaged_foreign_or_code_carrying_encoders_are_refused(camera_fleet, encoders, tmp_path):
    out, _ = encoders
    policy = fresh_cnn(camera_fleet)
    damaged = shutil.copytree(out, tmp_path / "damaged")
    data = bytearray((damaged / WEIGHTS).read_bytes())
    data[-1] ^= 0xFF
    (damaged / WEIGHTS).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="is damaged: its sha256 does not match"):
        load_encoders(policy, damaged)
    with pytest.raises(ValueError, match=r"fit cameras \['observation.images.wrist'\]"):
        load_encoders(policy, rewritten(out, tmp_path / "cameras", cameras=["observation.images.wrist"]))
    with pytest.raises(ValueError, match="fit vision_backbone resnet18"):
        load_encoders(policy, rewritten(out, tmp_path / "backbone", vision_backbone="resnet18"))
    marker = tmp_path / "pwned"
    with pytest.raises(ValueError, match=f"cannot load {WEIGHTS}"):
        load_encoders(policy, rewritten(out, tmp_path / "pickle", weights=pickle.dumps(Payload(marker))))
    assert not marker.exists()
    with pytest.raises(ValueError, match="--init-encoders .*No such file"):
        load_encoders(policy, tmp_path / "nowhere")


def test_episodes_per_robot_pretrains_on_each_robots_first_episodes_only(camera_fleet):
    store = FleetStore.open(camera_fleet)
    _, every_frame = pairs_of([store], ["observation.images.front"], 2, 16, 0)
    _, first_frames = pairs_of([store], ["observation.images.front"], 2, 16, 0, per_robot=1)
    assert every_frame == sum(store.shards[robot].episode_ends[-1] for robot in store.robots)
    assert first_frames == sum(store.shards[robot].episode_ends[0] for robot in store.robots) < every_frame


def one_core() -> None:
    """Run on one core: a torch thread count that follows the host's load (train/threads.py) would change the
    order of float sums, and so the last bits of the weights, between two runs."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def pretrain_command(data, out, crash_at=None) -> subprocess.CompletedProcess:
    """``python -m train.encoder_pretrain`` on one core: 60 steps at batch 16 with a resume state every epoch;
    SIGKILLed at the ``crash_at`` crash point, if given."""
    return subprocess.run([sys.executable, "-m", "train.encoder_pretrain", "--data", str(data), "--out", str(out),
                           "--gap", "2", "--steps", "60", "--batch-size", "16", "--checkpoint-interval", "1"],
                          capture_output=True, text=True, cwd=REPO, timeout=600, start_new_session=True,
                          preexec_fn=one_core, env={**train_env(), **({CRASH_AT: crash_at} if crash_at else {})})


def test_a_pretraining_killed_mid_way_carries_on_to_the_uninterrupted_runs_encoders(camera_fleet, tmp_path):
    uninterrupted = pretrain_command(camera_fleet, tmp_path / "uninterrupted")
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    assert not (tmp_path / "uninterrupted" / RESUME).exists()  # the resume state goes with the encoders written
    out = tmp_path / "crashed"
    killed = pretrain_command(camera_fleet, out, crash_at="encoder-pretrain-resume-state")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (out / WEIGHTS).exists()
    [record] = (out / RESUME).glob("step_*.json")
    step = json.loads(record.read_text())["step"]
    assert 0 < step < 60

    # what the rerun will read is checked first: a state of another config is refused, a damaged one skipped
    config = EncoderPretrainConfig(data=str(camera_fleet), out=str(out), gap=2, steps=60, batch_size=16)
    assert read_resume_state(out, config)["step"] == step
    with pytest.raises(ValueError, match="holds a pretraining of another config \\(--steps 60\\)"):
        read_resume_state(out, EncoderPretrainConfig(data=str(camera_fleet), out=str(out), gap=2, steps=90,
                                                     batch_size=16))
    damaged = tmp_path / "damaged"
    shutil.copytree(out / RESUME, damaged / RESUME)
    state = record.with_suffix(".pt").name
    (damaged / RESUME / state).write_bytes(pickle.dumps(Payload(tmp_path / "pwned")))
    assert read_resume_state(damaged, config) is None and not (tmp_path / "pwned").exists()

    resumed = pretrain_command(camera_fleet, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from step {step}" in resumed.stdout
    assert (out / WEIGHTS).read_bytes() == (tmp_path / "uninterrupted" / WEIGHTS).read_bytes()
    ends = [json.loads((run / DESCRIPTION).read_text()) for run in (out, tmp_path / "uninterrupted")]
    assert ends[0]["loss_first"] == ends[1]["loss_first"] and ends[0]["loss_last"] == ends[1]["loss_last"]
    assert not (out / RESUME).exists()
