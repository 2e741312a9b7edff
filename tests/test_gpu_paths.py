"""benchmarks/gpu_paths.py: its runner on CPU (the GPU runs are recorded in benchmarks/README.md), its refusals."""

import pytest
import torch

from benchmarks import gpu_paths, train_speed


def test_a_variant_under_torchrun_reports_figures_and_a_checkpoint_that_loads(pick_place_fleet, tmp_path):
    figures = gpu_paths.run_variant(pick_place_fleet, tmp_path / "run", True,
                                    ["--comm-hook", "int8", "--batch-size", "32", "--hidden", "32", "32"], 6, 2)
    assert figures["ok"] and figures["samples_per_s"] > 0
    assert 0 < figures["sync_efficiency"] <= 1
    assert figures["sync_batchnorm_layers"] == 0  # SyncBatchNorm only on GPU


def test_a_failing_variant_reports_its_error_line(pick_place_fleet, tmp_path):
    figures = gpu_paths.run_variant(pick_place_fleet, tmp_path / "run", False, ["--amp", "fp16"], 6, 2)
    assert not figures["ok"]
    assert figures["error"].startswith("error: --amp fp16 needs a GPU")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_only_runs_refuse_a_machine_without_cuda(tmp_path):
    with pytest.raises(SystemExit, match="no CUDA device"):
        gpu_paths.main(["--results-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_info:
        train_speed.main(["--no-cpu", "--results-dir", str(tmp_path)])
    assert exit_info.value.code == 2
