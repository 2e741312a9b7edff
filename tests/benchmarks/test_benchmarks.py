"""The benchmark scripts run and write their JSON and table rows (figures are not asserted)."""

import json

import pytest

from benchmarks import expert_success, sim_speed


def test_sim_speed_writes_results_and_a_table_row(tmp_path):
    tables = tmp_path / "README.md"
    sim_speed.main(["--seconds", "0.05", "--tasks", "reach", "--results-dir", str(tmp_path), "--tables", str(tables)])
    result = json.loads((tmp_path / "sim_speed.json").read_text())
    figures = result["tasks"][0]
    assert figures["task"] == "reach" and figures["frame_skip"] == 10
    assert abs(figures["physics_limit_control_steps_per_s"] - figures["mj_step_per_s"] / 10) <= 1
    assert {"cores", "torch", "device", "code_version", "date"} <= set(result["machine"])
    assert result["command"] == ("python -m benchmarks.sim_speed --seconds 0.05 --tasks reach --results-dir "
                                 f"{tmp_path} --tables {tables}")
    assert "| reach |" in tables.read_text()


@pytest.mark.slow
def test_sim_speed_renders_metaworld_at_each_size_into_its_own_results(tmp_path):
    tables = tmp_path / "README.md"
    sim_speed.main(["--seconds", "0.01", "--tasks", "metaworld/reach-v3", "--render-sizes", "16", "24",
                    "--results-dir", str(tmp_path), "--tables", str(tables)])
    assert not (tmp_path / "sim_speed.json").exists()  # our tasks' figures stay where they are
    result = json.loads((tmp_path / "sim_speed_metaworld.json").read_text())
    figures = result["tasks"][0]
    assert result["camera"] == "corner2" and figures["task"] == "metaworld/reach-v3" and figures["frame_skip"] == 5
    assert set(figures["render"]) == {"16", "24"}
    for size in figures["render"].values():
        assert size["fps"] > 0 and size["ms_per_frame"] == pytest.approx(1000 / size["fps"], rel=0.01)
        assert size["frame_vs_control_step"] == pytest.approx(
            figures["physics_limit_control_steps_per_s"] / size["fps"], rel=0.01)
    assert "<!-- sim_speed_metaworld:start -->" in tables.read_text() and "| metaworld/reach-v3 |" in tables.read_text()


def test_sim_speed_measures_ours_and_metaworld_apart(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sim_speed.main(["--tasks", "reach", "metaworld/reach-v3", "--out", str(tmp_path / "x.json")])
    assert "separate runs" in capsys.readouterr().err


def test_expert_success_counts_every_episode(tmp_path):
    tables = tmp_path / "README.md"
    result = expert_success.main(["--robots", "3", "--episodes", "1", "--tasks", "reach",
                                  "--results-dir", str(tmp_path), "--tables", str(tables)])
    reach = result["tasks"]["reach"]
    assert reach["episodes"] == 3 and set(reach["per_site_pc_success"]) == {"office", "warehouse", "factory"}
    assert json.loads((tmp_path / "expert_success.json").read_text())["tasks"]["reach"] == reach
    assert "| reach | 3 x 1 |" in tables.read_text()


@pytest.mark.slow
def test_collect_speed_measures_every_setup(tmp_path):
    from benchmarks import collect_speed

    tables = tmp_path / "README.md"
    result = collect_speed.main(["--robots", "2", "--episodes", "2", "--task", "reach", "--rounds", "1",
                                 "--results-dir", str(tmp_path), "--tables", str(tables)])
    assert set(result["steps_per_s_best"]) == {"limit", "limit_2proc", "vector_2env", "collect_1w", "collect_2w",
                                               "write_crc32c", "write_no_checksum"}
    assert all(rate > 0 for rate in result["steps_per_s_best"].values())
    assert result["ratios"]["scaling_1w_to_2w"] > 0 and result["checksums"]["write_rate_crc32c_vs_none"] > 0
    assert "| reach 2x2 |" in tables.read_text()


# MT10 needs 10 robots; with the camera (~0.1 s a frame on llvmpipe) one task on 2 robots keeps the run short
@pytest.mark.slow
@pytest.mark.parametrize("task, robots, cameras", [("metaworld/mt10", 10, []),
                                                   ("metaworld/reach-v3", 2, ["--cameras", "corner2"])],
                         ids=["mt10", "reach-v3-corner2"])
def test_collect_speed_runs_each_metaworld_robot_on_its_own_task(tmp_path, task, robots, cameras):
    from benchmarks import collect_speed

    tables = tmp_path / "README.md"
    result = collect_speed.main(["--task", task, "--robots", str(robots), "--episodes", "1", "--rounds", "1",
                                 *cameras, "--image-size", "16", "--results-dir", str(tmp_path), "--tables", str(tables)])
    name = "collect_speed_metaworld" + ("_cameras" if cameras else "")
    assert json.loads((tmp_path / f"{name}.json").read_text())["ratios"] == result["ratios"]
    assert not (tmp_path / "collect_speed.json").exists()
    setups = {"limit", "limit_2proc", "vector_2env", "collect_1w", "collect_2w", "write_crc32c", "write_no_checksum"}
    assert set(result["steps_per_s_best"]) == setups and all(r > 0 for r in result["steps_per_s_best"].values())
    # Every setup ran the same episodes, each robot its own task: the same env steps
    (steps,) = result["env_steps_rounds"]
    assert set(steps) == setups and len(set(steps.values())) == 1
    assert all(0 < value < float("inf") for value in result["ratios"].values())
    assert f"| {task} {robots}x1{' corner2 16px' if cameras else ''} |" in tables.read_text()


def test_collect_speed_refuses_a_group_larger_than_the_fleet(tmp_path, capsys):
    from benchmarks import collect_speed

    with pytest.raises(SystemExit):
        collect_speed.main(["--task", "metaworld/mt10", "--robots", "4", "--out", str(tmp_path / "x.json")])
    assert "--robots must be at least 10" in capsys.readouterr().err


@pytest.mark.slow
def test_loader_speed_measures_every_setup(tmp_path):
    from benchmarks import loader_speed

    tables = tmp_path / "README.md"
    result = loader_speed.main(["--robots", "2", "--episodes", "2", "--task", "reach", "--rounds", "1",
                                "--seconds", "0.05", "--batch-size", "8",
                                "--results-dir", str(tmp_path), "--tables", str(tables)])
    rates = result["samples_per_s_best"]
    assert {"numpy_limit", "memory_w0", "memory_w2", "streaming_w2", "lerobot_w0", "lerobot_w2"} <= set(rates)
    assert all(rate > 0 for rate in rates.values())
    assert result["ratios"]["memory_w0_vs_numpy_limit"] > 0
    assert json.loads((tmp_path / "loader_speed.json").read_text())["ratios"] == result["ratios"]
    assert "loader_speed" in tables.read_text()


@pytest.mark.slow
@pytest.mark.cluster
def test_gloo_latency_times_every_collective_on_two_real_ranks(tmp_path):
    from benchmarks import gloo_latency
    from benchmarks.common import realtime_permitted

    tables = tmp_path / "README.md"
    result = gloo_latency.main(["--iterations", "5", "--rounds", "1", "--results-dir", str(tmp_path),
                                "--tables", str(tables)])
    by_scheduler = result["milliseconds_per_call"]
    # Side by side under the real-time scheduler wherever this user may use it.
    assert list(by_scheduler) == (["normal", "fifo"] if realtime_permitted() else ["normal"])
    for times in by_scheduler.values():
        assert set(times) == set(gloo_latency.SIZES)
        for by_operation in times.values():
            assert set(by_operation) == set(gloo_latency.OPERATIONS)
            assert all(0 < call["median"] <= call["p90"] and call["mean"] > 0 for call in by_operation.values())
    assert "| normal | mlp gradients (100k floats) |" in tables.read_text()
