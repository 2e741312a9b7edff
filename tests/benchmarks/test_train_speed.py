"""benchmarks/train_speed.py runs every setup and prints its table row; on a given store it writes only the JSON
--out names (figures are not asserted). benchmarks/flops.py counts a step's FLOPs as the analytic count, and
MFU is achieved over peak."""

import json
import time
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from benchmarks import flops, train_speed, train_tables
from benchmarks.common import REALTIME, python_command


@pytest.mark.slow
@pytest.mark.cluster
def test_train_speed_measures_one_and_two_ranks(pick_place_fleet, tmp_path, capsys):
    tables, out = tmp_path / "README.md", tmp_path / "speed.json"
    result = train_speed.main(["--data", str(pick_place_fleet), "--steps", "4", "--log-interval", "2", "--rounds", "1",
                               "--no-realtime", "--results-dir", str(tmp_path), "--tables", str(tables),
                               "--out", str(out), "--", "--batch-size", "32", "--hidden", "32", "32"])
    scaling = result["mlp_scaling"]
    assert set(scaling["best"]) == {"1r1t", "1r2t", "2r1t", "2r1t_gloo", "2p1t"}
    assert not any(setup["realtime"] for setup in scaling["setups"].values())
    assert all(figures["samples_per_s"] > 0 for figures in scaling["best"].values())
    assert scaling["best"]["1r1t"]["sync_efficiency"] == 1.0
    assert 0 < scaling["best"]["2r1t"]["sync_efficiency"] < 1
    assert scaling["ratios"]["weak_scaling_efficiency"] > 0 and scaling["ratios"]["weak_scaling_efficiency_gloo"] > 0
    assert "weak_scaling_efficiency_fifo" not in scaling["ratios"]
    assert json.loads(out.read_text())["mlp_scaling"]["ratios"] == scaling["ratios"]
    assert "cpu (gloo) | fleet | --batch-size 32 --hidden 32 32 | 4 |" in capsys.readouterr().out
    assert not tables.exists() and not (tmp_path / "train_speed.json").exists()  # a given store: not recorded


@pytest.mark.slow
@pytest.mark.cluster
def test_the_image_case_trains_the_cnn_on_cameras_and_reports_its_data_wait(camera_fleet, tmp_path, capsys):
    out = tmp_path / "image.json"
    result = train_speed.main(["--case", "image", "--data", str(camera_fleet), "--steps", "4", "--log-interval", "2",
                               "--rounds", "1", "--no-realtime", "--out", str(out), "--", "--batch-size", "8"])
    scaling = result["image_scaling"]
    assert list(scaling["best"]) == ["1r1t", "bare_1r1t", "1r2t", "bare_1r2t", "2r1t", "2r1t_gloo", "2p1t"]
    assert 0 <= scaling["data_wait_share"] < 1 and scaling["ratios"]["weak_scaling_efficiency"] > 0
    assert scaling["ratios"]["bc_vs_bare_1r1t"] > 0 and scaling["ratios"]["bc_vs_bare_1r2t"] > 0
    assert scaling["flops_per_sample"]["convolution_share"] > 0.9  # the cnn is its convolutions
    assert scaling["utilisation"]["1r2t"]["peak_threads"] == 2 and scaling["utilisation"]["1r1t"]["mfu"] > 0
    assert {figures["amp"] for figures in scaling["best"].values()} == {"none"}  # this CPU: no bf16 units
    assert json.loads(out.read_text())["image_scaling"] == scaling
    assert "--policy cnn --inputs proprio+cameras --batch-size 32 --batch-size 8" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.cluster
def test_the_threads_case_runs_two_runs_and_two_torchrun_agents_with_no_thread_option(pick_place_fleet, tmp_path,
                                                                                      capsys):
    out = tmp_path / "threads.json"
    result = train_speed.main(["--case", "threads", "--data", str(pick_place_fleet), "--steps", "4", "--log-interval",
                               "2", "--rounds", "1", "--out", str(out),
                               "--", "--batch-size", "32", "--hidden", "32", "32"])
    scaling = result["threads_scaling"]
    assert scaling["setups"]["2p_auto"] == {"ranks": 1, "threads": 0, "runs": 2, "realtime": False, "agents": False}
    assert scaling["setups"]["2a_auto"] == {"ranks": 2, "threads": 0, "runs": 1, "realtime": False, "agents": True}
    best = scaling["best"]
    assert best["2p_auto"]["slowest_run_samples_per_s"] <= best["2p_auto"]["samples_per_s"] / 2
    assert 0 < best["2a_auto"]["sync_efficiency"] < 1  # the two agents' ranks joined one DDP job
    assert set(scaling["ratios"]) == {"each_of_two_runs_vs_one_alone", "two_agents_vs_standalone"}
    assert json.loads(out.read_text())["threads_scaling"] == scaling
    assert "cpu (gloo) | fleet | --batch-size 32 --hidden 32 32 | 4 |" in capsys.readouterr().out


def test_the_realtime_setups_repeat_the_cpu_ones_under_the_scheduler_and_get_their_own_ratios(monkeypatch, tmp_path):
    """What ``*_fifo`` adds, on recorded rates (the scheduler itself runs in test_benchmarks' gloo-latency case)."""
    started = []

    def figures(data, work, ranks, threads, runs, realtime, *_):
        started.append((work.name, ranks, threads, runs, realtime))
        samples = 100.0 * ranks * runs * (1.5 if realtime else 1.0) * (0.9 if ranks > 1 else 1.0)
        return {"samples_per_s": samples, "sync_efficiency": 1.0, "data_wait_s": 0.0, "compute_s": 1.0,
                "communication_s": 0.0}

    monkeypatch.setattr(train_speed, "train_figures", figures)
    args = SimpleNamespace(steps=4, log_interval=2, bc_options=[], rounds=2)
    result = train_speed.cpu_scaling(tmp_path, tmp_path, args, realtime=True)
    assert started[:8] == [("1r1t", 1, 1, 1, False), ("1r2t", 1, 2, 1, False), ("2r1t", 2, 1, 1, False),
                           ("2r1t_gloo", 2, 1, 1, False), ("2p1t", 1, 1, 2, False), ("1r1t_fifo", 1, 1, 1, True),
                           ("2r1t_fifo", 2, 1, 1, True), ("2p1t_fifo", 1, 1, 2, True)] and len(started) == 16
    assert result["ratios"]["weak_scaling_efficiency"] == result["ratios"]["weak_scaling_efficiency_fifo"] == 0.9
    assert result["ratios"]["two_ranks_vs_two_processes_fifo"] == 0.9
    assert python_command(2, realtime=True)[:len(REALTIME) + 3] == [*REALTIME, python_command()[0], "-m",
                                                                    "torch.distributed.run"]


class Tiny(nn.Module):
    """A 3x3 convolution of 3 to 4 channels on 8x8 images, then a linear layer to 5; its loss is a mean square."""

    def __init__(self):
        super().__init__()
        self.convolution, self.linear = nn.Conv2d(3, 4, 3), nn.Linear(4 * 6 * 6, 5)

    def forward(self, batch):
        return self.linear(self.convolution(batch["image"]).relu().flatten(1)).square().mean()


def test_a_steps_flops_are_the_analytic_count():
    convolution = 2 * 2 * 4 * 6 * 6 * 3 * 3 * 3  # 2 x batch x out channels x output pixels x in channels x kernel
    linear = 2 * 2 * 144 * 5
    counted = flops.step_flops(Tiny(), {"image": torch.randn(2, 3, 8, 8)})
    # backward: the linear layer's input and weight gradients; the convolution's weights only (the images need none)
    assert (counted["forward"], counted["backward"]) == (convolution + linear, convolution + 2 * linear)
    assert counted["total"] == 2 * convolution + 3 * linear
    assert counted["convolution_share"] == pytest.approx(2 * convolution / counted["total"])


def test_mfu_is_achieved_over_peak_and_each_setup_is_held_against_its_dtypes_peak():
    assert flops.mfu(2e9, 10.0, 40.0) == {"gflops": 20.0, "mfu": 0.5}
    peaks = [{"fp32": {"1": {"gflops": 40.0}, "2": {"gflops": 80.0}}, "bf16": {"1": {"gflops": 4.0}}},
             {"fp32": {"1": {"gflops": 20.0}, "2": {"gflops": 80.0}}, "bf16": {"1": {"gflops": 2.0}}}]
    rounds = [{"a": {"samples_per_s": 10.0, "amp": "none"}, "b": {"samples_per_s": 1.0, "amp": "bf16"},
               "c": {"samples_per_s": 20.0}}] * 2
    use = flops.utilisation(rounds, peaks, 2e9, {"a": 1, "b": 1, "c": 2})
    assert use["a"] == {"dtype": "fp32", "peak_threads": 1, "gflops": 20.0, "mfu": 0.75}  # median of 0.5 and 1.0
    assert use["b"]["dtype"] == "bf16" and use["b"]["mfu"] == 0.75
    assert use["c"]["mfu"] == 0.5


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_matmul_peak_is_positive_within_its_time_bound_and_restores_the_threads(dtype):
    threads = torch.get_num_threads()
    start = time.perf_counter()
    peak = flops.matmul_peak(dtype, 1, seconds=0.2)
    assert time.perf_counter() - start < 2.0  # an emulated bf16 takes a smaller side, not longer
    assert peak["gflops"] > 0 and 128 <= peak["side"] <= 2048
    assert torch.get_num_threads() == threads


def test_cpu_features_name_the_bf16_units_seen(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert flops.cpu_features(cpuinfo)["bf16_flags"] == ["avx512_bf16"]
    assert flops.cpu_features(cpuinfo)["bf16_hardware"]
    cpuinfo.write_text("flags\t\t: fpu avx2\n")
    assert not flops.cpu_features(cpuinfo)["bf16_hardware"]


def test_the_bare_loop_runs_beside_one_rank_and_every_setup_is_held_against_the_threads_it_uses(monkeypatch,
                                                                                               tmp_path):
    monkeypatch.setattr(train_speed.os, "cpu_count", lambda: 2)
    assert {name: train_speed.peak_threads(setup) for name, setup in train_speed.CPU_SETUPS.items()} == {
        "1r1t": 1, "1r2t": 2, "2r1t": 2, "2r1t_gloo": 2, "2p1t": 2}
    started = []

    def figures(data, work, ranks, threads, *_):
        started.append(work.name)
        return {"samples_per_s": 90.0 if work.name.startswith("bare") else 81.0 * ranks, "sync_efficiency": 1.0,
                "data_wait_s": 0.0, "compute_s": 1.0, "communication_s": 0.0, "amp": "none"}

    monkeypatch.setattr(train_speed, "train_figures", figures)
    monkeypatch.setattr(train_speed, "bare_figures", figures)
    monkeypatch.setattr(train_speed, "machine_peaks", lambda threads: {
        dtype: {str(count): {"gflops": 10.0 * count} for count in threads} for dtype in ("fp32", "bf16")})
    args = SimpleNamespace(steps=4, log_interval=2, bc_options=[], rounds=1)
    result = train_speed.cpu_scaling(tmp_path, tmp_path, args, realtime=False, flops={"total": 1e8}, bare=True)
    assert started == ["1r1t", "bare_1r1t", "1r2t", "bare_1r2t", "2r1t", "2r1t_gloo", "2p1t"]
    assert result["ratios"]["bc_vs_bare_1r1t"] == result["ratios"]["bc_vs_bare_1r2t"] == 0.9
    assert result["utilisation"]["1r1t"]["mfu"] == pytest.approx(8.1 / 10) and result["peaks"][0]["fp32"]["2"]
    assert result["utilisation"]["2r1t"]["mfu"] == pytest.approx(16.2 / 20)
    assert train_tables.limit_cells(result | {"flops_per_sample": {"total": 1e8, "convolution_share": 0.5}}) == [
        "100", "50.0%", "81.0%", "40.5%", "81.0%", "0.90", "0.90"]
