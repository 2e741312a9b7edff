"""benchmarks/gpu_paths.py: its runner on CPU (the GPU runs are recorded in benchmarks/README.md), its refusals, its
rounds kept as they land."""

import argparse
import json

import pytest
import torch

from benchmarks import gpu_paths, train_speed


@pytest.mark.slow
@pytest.mark.cluster
def test_a_variant_under_torchrun_reports_figures_and_a_checkpoint_that_loads(pick_place_fleet, tmp_path):
    figures = gpu_paths.run_variant(pick_place_fleet, tmp_path / "run", True,
                                    ["--comm-hook", "int8", "--batch-size", "32", "--hidden", "32", "32"], 6, 2)
    assert figures["ok"] and figures["samples_per_s"] > 0
    assert 0 < figures["sync_efficiency"] <= 1
    assert figures["sync_batchnorm_layers"] == 0  # SyncBatchNorm only on GPU


@pytest.mark.slow
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


@pytest.mark.parametrize("arguments, message", [(["--variants", "mlp", "mlp ddp"], "unknown variant 'mlp ddp'"),
                                                (["--rounds", "0"], "--rounds must be at least 1")])
def test_bad_variants_or_rounds_get_a_one_line_error_before_anything_runs(tmp_path, capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_info:
        gpu_paths.main([*arguments, "--results-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_rounds_keep_the_fastest_run_and_every_rounds_rate():
    slow, fast = {"ok": True, "samples_per_s": 90.0}, {"ok": True, "samples_per_s": 100.0}
    failed = {"ok": False, "error": "boom"}
    assert gpu_paths.fastest_round([slow, failed, fast]) == fast | {"round_samples_per_s": [90.0, None, 100.0]}
    assert gpu_paths.fastest_round([slow]) == slow
    assert gpu_paths.fastest_round([failed, failed]) == failed
    assert {"act ddp", "diffusion ddp"} <= set(gpu_paths.VARIANTS) and gpu_paths.VARIANTS["act ddp"][1]  # torchrun


def test_each_run_lands_as_it_ends_and_the_same_job_carries_on_after_the_last_kept(tmp_path):
    args = argparse.Namespace(variants=["mlp", "act"], rounds=2, steps=200, name="cost", results_dir=tmp_path,
                              tables=None, out=None)
    progress = tmp_path / "cost.progress.json"

    def cut_short(round_index, index, name):  # a machine's time limit ends the job in round 2's first run
        if round_index == 1:
            raise TimeoutError
        return {"ok": True, "samples_per_s": 10.0 * (index + 1)}

    with pytest.raises(TimeoutError):
        gpu_paths.run_rounds(args, cut_short)
    kept = json.loads(progress.read_text())
    assert kept["rounds"] == [{"mlp": {"ok": True, "samples_per_s": 10.0}, "act": {"ok": True, "samples_per_s": 20.0}}]

    calls, figures = [], {"ok": True, "samples_per_s": 1.0}

    def counted(round_index, index, name):
        calls.append((round_index, name))
        return figures

    rounds = gpu_paths.run_rounds(args, counted)
    assert calls == [(1, "mlp"), (1, "act")]
    assert rounds == [kept["rounds"][0], {"mlp": figures, "act": figures}]
    assert not progress.exists()

    progress.write_text(json.dumps(kept))  # kept by another job (other steps): that one starts afresh
    gpu_paths.run_rounds(argparse.Namespace(**vars(args) | {"steps": 100}), counted)
    assert len(calls) == 2 + 4
