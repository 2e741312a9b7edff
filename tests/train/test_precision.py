"""--amp: auto picks bf16 only for camera policies on CPUs with bfloat16 units; bf16 trains to fp32's loss."""

import json
import shutil

import pytest
import torch

from train import precision
from train.precision import cpu_bf16_units, resolve_amp
from train_helpers import metrics, train_here

CPU, GPU = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize("flags, units", [
    ("fpu sse avx2 avx512f avx512_bf16 amx_tile amx_bf16 amx_int8", ("amx_bf16", "avx512_bf16")),
    ("fpu sse avx2 avx512f avx512_bf16", ("avx512_bf16",)),
    ("fpu sse avx2 fma", ()),
])
def test_the_bfloat16_units_are_read_off_the_cpu_flags(flags, units, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert cpu_bf16_units(cpuinfo) == units
    assert cpu_bf16_units(tmp_path / "missing") == ()  # no /proc: no units claimed


@pytest.mark.parametrize("units, amp, device, images, resumed, expected", [
    (("amx_bf16",), "auto", CPU, True, None, "bf16"),
    (("avx512_bf16",), "auto", CPU, True, None, "bf16"),
    (("amx_bf16",), "auto", CPU, False, None, "none"),   # a state policy gains too little
    ((), "auto", CPU, True, None, "none"),               # emulated bfloat16 is slower than float32
    (("amx_bf16",), "auto", GPU, True, None, "none"),    # GPUs keep float32 unless asked
    (("amx_bf16",), "auto", CPU, True, "none", "none"),  # a resume keeps its checkpoint's precision
    ((), "auto", CPU, True, "bf16", "bf16"),
    ((), "auto", CPU, True, "something", "none"),        # a checkpoint's nonsense is not taken
    ((), "bf16", CPU, False, None, "bf16"),              # what the user asks for is what runs
    (("amx_bf16",), "none", CPU, True, "bf16", "none"),
])
def test_auto_resolves_by_cpu_policy_and_checkpoint(units, amp, device, images, resumed, expected, monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: units)
    resolved, reason = resolve_amp(amp, device, images, resumed)
    assert resolved == expected
    assert reason.startswith("auto: ") == (amp == "auto")


CNN_ON_CAMERAS = ["--policy", "cnn", "--batch-size", "16", "--log-interval", "10", "--val-fraction", "0"]  # as
# conftest's camera_cnn_run


@pytest.fixture(scope="module")
def runs_by_amp(camera_fleet, camera_cnn_run, tmp_path_factory):
    """40 cnn steps on the camera fleet with --amp none and with bf16: camera_cnn_run is the one --amp auto
    resolves to on this CPU, the other is trained here, in process. Read-only."""
    default = json.loads((camera_cnn_run / "config.json").read_text())["config"]["optim"]["amp"]
    assert default == resolve_amp("auto", CPU, True)[0]  # a run records the precision --amp auto resolved to
    other = "bf16" if default == "none" else "none"
    run = tmp_path_factory.mktemp("amp") / other
    completed = train_here("--data", camera_fleet, *CNN_ON_CAMERAS, "--out", run, "--max-steps", "40",
                           "--amp", other)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return {default: camera_cnn_run, other: run}


@pytest.mark.slow
def test_bf16_on_cpu_trains_to_the_loss_of_float32(runs_by_amp):
    losses = {amp: [record["loss"] for record in metrics(run) if "loss" in record] for amp, run in runs_by_amp.items()}
    assert len(losses["bf16"]) == len(losses["none"]) == 4
    assert losses["bf16"][-1] < 0.5 * losses["bf16"][0]  # it learns,
    for low, full in zip(losses["bf16"], losses["none"]):  # and follows float32's curve, window by window
        assert abs(low - full) <= 0.05 * full + 0.01, losses


@pytest.mark.slow
def test_a_resume_with_amp_auto_keeps_the_checkpoints_bf16(camera_fleet, runs_by_amp, tmp_path):
    run = shutil.copytree(runs_by_amp["bf16"], tmp_path / "run", symlinks=True)
    resumed = train_here("--data", camera_fleet, *CNN_ON_CAMERAS, "--out", run, "--max-steps", "42")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "amp bf16 (auto: as the checkpoint was trained)" in resumed.stdout
    assert json.loads((run / "config.json").read_text())["config"]["optim"]["amp"] == "bf16"


@pytest.mark.slow
def test_a_resume_with_another_amp_is_refused(camera_fleet, runs_by_amp, tmp_path):
    run = shutil.copytree(runs_by_amp["bf16"], tmp_path / "run", symlinks=True)
    refused = train_here("--data", camera_fleet, *CNN_ON_CAMERAS, "--out", run, "--max-steps", "44", "--amp", "none")
    assert refused.returncode == 2 and "trained with --amp bf16, not none" in refused.stderr
