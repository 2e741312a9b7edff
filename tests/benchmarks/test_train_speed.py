"""benchmarks/train_speed.py runs every setup and prints its table row; on a given store it writes only the JSON
--out names (figures are not asserted)."""

import json
from types import SimpleNamespace

import pytest

from benchmarks import train_speed
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
    assert set(scaling["best"]) == {"1r1t", "1r2t", "2r1t", "2r1t_gloo", "2p1t"}
    assert 0 <= scaling["data_wait_share"] < 1 and scaling["ratios"]["weak_scaling_efficiency"] > 0
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
