"""experiments.compute_scaling and its step model: fits recover known parameters, predictions behave, the
script turns measurements into its JSON, chart and docs section, and its measuring parts run at a tiny size."""

import dataclasses
import json

import pytest

from experiments import compute_scaling
from experiments.compute_scaling_gpu import gpu_figures, gpu_text
from experiments.compute_scaling_report import beyond_the_sweep, curve_settings, fit_transports, policy_cost
from experiments.step_model import (TRANSPORT_ALGORITHMS, PolicyCost, Setting, Transport, ddp_buckets,
                                    fit_transport, int8_payload_bytes, one_rank_rate, powersgd_bytes, predict,
                                    scaling_limit, straggler_s, transfer_s)
from train.comm.shm_all_reduce import MAX_SLOT_BYTES

# A world that follows the model exactly: the script must find these parameters again.
TRUE_TRANSPORTS = {"gloo": Transport("ring all-reduce", 300e-6, 1.0e-9,
                                       warm=Transport("ring all-reduce", 50e-6, 0.7e-9)),
                   "int8_exchange": Transport("ring all-gather", 150e-6, 1.5e-9,
                                                warm=Transport("ring all-gather", 40e-6, 1.2e-9)),
                   "ring": Transport("ring all-reduce", 60e-6, 0.3e-9,
                                     warm=Transport("ring all-reduce", 50e-6, 0.3e-9)),
                   "shm": Transport("shared memory", 20e-6, 0.1e-9, MAX_SLOT_BYTES,
                                    warm=Transport("shared memory", 10e-6, 0.08e-9, MAX_SLOT_BYTES))}
TRUE_COSTS = {
    "mlp": PolicyCost(batch=512, data_s=0.3e-3, compute_s=5e-3, shapes=((256, 39), (256,), (256, 256), (256,),
                                                                        (7, 256), (7,)),
                      shared_data_s=0.35e-3, shared_compute_s=5.6e-3, step_times_s=(5.5e-3, 6e-3, 6.2e-3, 9e-3),
                      int8_codec_s=0.2e-3, powersgd_codec_s=0.5e-3),
    "act": PolicyCost(batch=64, data_s=0.5e-3, compute_s=80e-3, shapes=((512, 512), (512,)) * 40,
                      shared_data_s=0.6e-3, shared_compute_s=85e-3, step_times_s=(84e-3, 85e-3, 86e-3, 88e-3),
                      int8_codec_s=30e-3, powersgd_codec_s=40e-3),
}
SIZES = (16, 1024, 65536, 1 << 20, 4 << 20)  # floats
# [ranks, bytes] of a sweep of 16 and 4096 floats: the int8 exchange sends codes padded to blocks, and scales
SWEPT_16_AND_4096 = {"gloo": [[2, 64], [2, 16384]], "ring": [[2, 64], [2, 16384]], "shm": [[2, 64], [2, 16384]],
                     "int8_exchange": [[2, int8_payload_bytes(64)], [2, int8_payload_bytes(16384)]]}


def synthetic_measurements(grad_accum: int) -> dict:
    """What compute_scaling.measure would record in the world above (100 measured steps per run)."""
    transports = {name: [[2, 4 * n, *[transport.seconds(2, 4 * n)] * 2, *[transport.seconds(2, 4 * n, warm=True)] * 2]
                         for n in SIZES] for name, transport in TRUE_TRANSPORTS.items()}
    policies = {}
    for policy, cost in TRUE_COSTS.items():
        records = {}
        for name, run in compute_scaling.runs(grad_accum).items():
            k, shared = run.grad_accum, run.ranks > 1 or run.launch == "pair"
            data, compute = (cost.shared_data_s, cost.shared_compute_s) if shared else (cost.data_s, cost.compute_s)
            predicted = (predict(cost, Setting(run.hook, k), run.ranks, TRUE_TRANSPORTS) if run.launch != "pair"
                         else {"communication_s": 0.0, "samples_per_s": 2 * cost.batch / (data + compute)})
            steps = 200 if run.launch == "pair" else 100  # a pair's figures are summed over its two processes
            records[name] = {**run._asdict(), "steps": steps, "data_wait_s": steps * k * data,
                             "compute_s": steps * k * compute, "communication_s": steps * predicted["communication_s"],
                             "samples_per_s": predicted["samples_per_s"],
                             "rounds_samples_per_s": [predicted["samples_per_s"]],
                             "sync_efficiency": k * compute / (k * compute + predicted["communication_s"])}
            if run.launch == "pair":
                records[name]["step_times_s"] = list(cost.step_times_s)
        policies[policy] = {"batch": cost.batch, "shapes": [list(shape) for shape in cost.shapes],
                            "runs": records}
    machine = {"date": "2026-01-01 00:00 UTC", "cores": 2, "device": "cpu", "code_version": "test"}
    return {"machine": machine, "command": "python -m experiments.compute_scaling", "data": "data/fleet",
            "transports": transports, "policies": policies}


@pytest.mark.parametrize("algorithm", TRANSPORT_ALGORITHMS)
def test_the_fit_recovers_alpha_and_beta_from_noisy_timings(algorithm):
    true = Transport(algorithm, 80e-6, 0.4e-9, MAX_SLOT_BYTES if algorithm == "shared memory" else None)
    noise = [1.01, 0.99, 1.0, 1.02, 0.98, 1.0]  # +-2%, fixed
    points = [(ranks, 4 * n, true.seconds(ranks, 4 * n) * noise[index % len(noise)])
              for index, (ranks, n) in enumerate((r, n) for r in (2, 4) for n in (16, 4096, 1 << 18, 1 << 20, 8 << 20))]
    fitted, error = fit_transport(algorithm, points, true.max_call_bytes)
    assert fitted.alpha_s == pytest.approx(true.alpha_s, rel=0.05)
    assert fitted.beta_s_per_byte == pytest.approx(true.beta_s_per_byte, rel=0.05)
    assert error < 0.03


def test_a_fit_never_goes_negative():
    points = [(2, 4, 1e-3), (2, 4 << 20, 1e-3)]  # no size dependence at all
    fitted, _ = fit_transport("ring all-reduce", points)
    assert fitted.beta_s_per_byte >= 0 and fitted.alpha_s == pytest.approx(0.5e-3, rel=1e-6)


def test_buckets_and_compressed_bytes_follow_ddp_and_torch():
    assert ddp_buckets([400] * 10 + [30 << 20, 10 << 20], 25 << 20) == [[11], [10], list(range(9, -1, -1))]
    # (256, 39) and (256, 256) and (7, 256) are worth compressing at rank 2; the vector is not
    assert powersgd_bytes([(256, 39), (256,), (256, 256), (7, 256)], 2) == (4 * 256, 4 * 1038, 4 * 1102)
    assert int8_payload_bytes(4 * 2048) == 2048 + 8 and int8_payload_bytes(4 * 1025) == 2048 + 8
    assert sum(TRUE_COSTS["act"].bucket_bytes()) == TRUE_COSTS["act"].gradient_bytes
    assert len(TRUE_COSTS["act"].buckets()) == 3 and len(TRUE_COSTS["mlp"].buckets()) == 1


def test_powersgd_pays_one_cold_call_per_bucket_and_warm_calls_after_it():
    cost = TRUE_COSTS["act"]  # 3 buckets, each sending its vectors, P and Q
    latency_only = Transport("ring all-reduce", 1e-3, 0.0)  # 2(R-1) x 1 ms a call
    calls = {warm: transfer_s(cost, Setting("powersgd"), 4, {"gloo": dataclasses.replace(latency_only, warm=warm)})
             for warm in (None, Transport("ring all-reduce", 0.0, 0.0))}
    assert calls[None] == pytest.approx(cost.powersgd_codec_s + 9 * 6e-3)
    assert calls[Transport("ring all-reduce", 0.0, 0.0)] == pytest.approx(cost.powersgd_codec_s + 3 * 6e-3)


def test_a_bucket_larger_than_the_sweep_is_flagged_per_transport():
    fits = {name: {"sizes_bytes": [64, 1 << 20]} for name in ("gloo", "int8_exchange")}
    warnings = beyond_the_sweep(fits, {"small": {"largest_bucket_bytes": 1 << 20},
                                       "large": {"largest_bucket_bytes": 3 << 20}})
    assert len(warnings) == 1 and "large's largest bucket sends 3.1 MB by gloo" in warnings[0]  # int8: ~0.8 MB


@pytest.mark.parametrize("policy", TRUE_COSTS)
def test_predictions_are_monotone_and_never_beat_the_ideal(policy):
    cost, ranks = TRUE_COSTS[policy], [1, 2, 3, 4, 8, 16, 32, 64]
    for name, setting in curve_settings(4, 2).items():
        curve = [predict(cost, setting, r, TRUE_TRANSPORTS) for r in ranks]
        efficiency = [point["sync_efficiency"] for point in curve]
        assert all(later <= earlier for earlier, later in zip(efficiency[1:], efficiency[2:])), name
        assert all(point["samples_per_s"] / one_rank_rate(cost) <= r + 1e-9 for point, r in zip(curve, ranks)), name
        if setting.hook in ("shm", "ring", "none"):  # nothing to pay at one rank
            assert curve[0]["samples_per_s"] == pytest.approx(one_rank_rate(cost))
    for hook in ("shm", "ring", "none", "int8", "powersgd"):
        for r in ranks[1:]:
            plain, accumulating = (predict(cost, Setting(hook, k), r, TRUE_TRANSPORTS) for k in (1, 4))
            assert accumulating["sync_efficiency"] > plain["sync_efficiency"]
    assert straggler_s((1.0, 3.0), 1) == 0 and straggler_s((1.0, 3.0), 2) == pytest.approx(0.5)  # E[max] 2.5
    assert straggler_s((1.0, 3.0), 64) == pytest.approx(1.0, abs=1e-12) and straggler_s((), 8) == 0
    assert scaling_limit({1: {"speedup": 1.0, "sync_efficiency": 1.0}, 2: {"speedup": 1.9, "sync_efficiency": 0.9},
                          4: {"speedup": 2.0, "sync_efficiency": 0.6}}) == {"ranks": 4,
                                                                            "reason": "speedup +5% over 2 ranks"}


def test_the_model_fitted_to_a_world_that_follows_it_recovers_its_parameters():
    measurements = synthetic_measurements(4)
    transports, fits = fit_transports(measurements["transports"])
    for name, true in TRUE_TRANSPORTS.items():
        assert transports[name].alpha_s == pytest.approx(true.alpha_s, rel=1e-6)
        assert transports[name].beta_s_per_byte == pytest.approx(true.beta_s_per_byte, rel=1e-6)
        assert transports[name].warm.alpha_s == pytest.approx(true.warm.alpha_s, rel=1e-6)
        assert transports[name].warm.beta_s_per_byte == pytest.approx(true.warm.beta_s_per_byte, rel=1e-6)
        assert fits[name]["rms_relative_error"] < 1e-6 and fits[name]["warm_rms_relative_error"] < 1e-6
    for policy, true in TRUE_COSTS.items():
        recovered = policy_cost(measurements["policies"][policy], 25.0, 2)
        assert recovered == dataclasses.replace(true, **{name: pytest.approx(getattr(true, name), rel=1e-9) for name in
                                                         ("data_s", "compute_s", "shared_data_s", "shared_compute_s",
                                                          "int8_codec_s", "powersgd_codec_s")})


def test_the_script_writes_its_json_chart_and_section_from_recorded_measurements(tmp_path):
    source = tmp_path / "recorded.json"
    source.write_text(json.dumps({"measurements": synthetic_measurements(4)}))
    docs = tmp_path / "scaling.md"
    docs.write_text("# Scaling\n\n## Data scaling\n\n<!-- scaling_data:start -->\ntheirs\n<!-- scaling_data:end -->\n")
    arguments = ["--skip-measure", "--measurements", str(source), "--policies", "mlp", "act", "--docs", str(docs),
                 "--plot", str(tmp_path / "media" / "compute_scaling.png"), "--results-dir", str(tmp_path / "results")]
    result = compute_scaling.main(arguments)
    compute_scaling.main(arguments)  # a rerun replaces the section

    written = json.loads((tmp_path / "results" / "compute_scaling.json").read_text())
    assert set(written) >= {"command", "config", "measurements", "fits", "policies", "checks", "predictions",
                            "where_it_stops", "gpu", "plot"}
    assert written["checks"] == json.loads(json.dumps(result["checks"]))
    checked = [row for row in written["checks"] if row["role"] == "check"]
    assert len(checked) == 2 * 7 and all(abs(row["error"]) < 1e-6 for row in written["checks"])
    assert {row["point"] for row in written["checks"] if row["role"] == "calibration"} == {
        "1 process", "1 rank, int8", "1 rank, powersgd"}
    ring = written["predictions"]["mlp"]["ring"]
    assert ring["ranks"] == [1, 2, 4, 8, 16, 32, 64] and ring["speedup"][0] == pytest.approx(1.0)
    assert len(written["where_it_stops"]) == 2
    assert (tmp_path / "media" / "compute_scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = docs.read_text()
    assert text.startswith("# Scaling\n\n## Data scaling\n\n<!-- scaling_data:start -->\ntheirs\n")
    assert text.count("## Compute scaling") == 1 and text.count("<!-- scaling_compute:start -->") == 1
    assert "](media/compute_scaling.png)" in text and "--skip-measure" in text


@pytest.mark.slow
@pytest.mark.cluster
def test_retiming_the_transports_replaces_them_and_keeps_the_recorded_training_runs(tmp_path):
    recorded = synthetic_measurements(4)
    source = tmp_path / "recorded.json"
    source.write_text(json.dumps({"measurements": recorded}))
    arguments = ["--skip-measure", "--retime-transports", "--measurements", str(source), "--policies", "mlp",
                 "--sweep-floats", "16", "4096", "--sweep-seconds", "0.01", "--sweep-iterations", "5",
                 "--sweep-gap-ms", "1", "--out", str(tmp_path / "out"), "--docs", str(tmp_path / "scaling.md"),
                 "--plot", str(tmp_path / "compute_scaling.png"), "--results-dir", str(tmp_path / "results")]
    written = compute_scaling.main(arguments)["measurements"]
    assert written["policies"] == json.loads(json.dumps(recorded["policies"]))
    assert written["transports"] != recorded["transports"]
    assert {name: [p[:2] for p in points] for name, points in written["transports"].items()} == SWEPT_16_AND_4096
    assert "--retime-transports" in written["transports_command"]
    assert "# times the transports again" in (tmp_path / "scaling.md").read_text()


def test_retiming_the_transports_without_skip_measure_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        compute_scaling.main(["--retime-transports", "--results-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "goes with --skip-measure" in capsys.readouterr().err


def test_skip_measure_without_measurements_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        compute_scaling.main(["--skip-measure", "--results-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "run without --skip-measure first" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.cluster
def test_the_transport_sweep_times_every_transport_between_two_ranks(tmp_path):
    config = compute_scaling.ScalingConfig(sweep_floats=(16, 4096), sweep_seconds=0.01, sweep_iterations=5)
    points = compute_scaling.measure_transports(config, tmp_path)
    assert set(points) == {"gloo", "int8_exchange", "ring", "shm"}
    assert {name: [p[:2] for p in measured] for name, measured in points.items()} == SWEPT_16_AND_4096
    assert all(len(p) == 6 and min(p[2:]) > 0 for measured in points.values() for p in measured)


@pytest.mark.slow
def test_two_processes_at_once_log_every_step_for_the_straggler_wait(pick_place_fleet, tmp_path):
    config = compute_scaling.ScalingConfig(mlp_batch=16, steps=4, log_interval=2)
    figures = compute_scaling.train(config, pick_place_fleet, "mlp", compute_scaling.runs(2)["2 processes"],
                                    tmp_path / "pair")
    assert figures["steps"] == 2 * 2 and len(figures["step_times_s"]) == 4 and figures["communication_s"] == 0
    assert all(seconds > 0 for seconds in figures["step_times_s"])


@pytest.mark.slow
@pytest.mark.cluster
def test_two_torchrun_agents_on_loopback_train_and_report_their_windows(pick_place_fleet, tmp_path):
    config = compute_scaling.ScalingConfig(mlp_batch=16, steps=4, log_interval=2)
    run = compute_scaling.runs(2)["2 agents on loopback, ring"]
    figures = compute_scaling.train(config, pick_place_fleet, "mlp", run, tmp_path / "run")
    assert figures["steps"] == 2 and figures["samples_per_s"] > 0 and figures["communication_s"] > 0
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    assert written["world_size"] == 2 and written["config"]["ddp"]["comm_hook"] == "ring"


def test_the_gpu_checks_give_each_policy_ddps_cost_at_one_rank_and_the_spread_of_rounds(tmp_path):
    def run(samples_per_s: float, step_s: float, rounds: list[float], torchrun: bool) -> dict:
        # 150 measured steps (200 - the first log window of 50), all of them data wait and compute
        return {"ok": True, "torchrun": torchrun, "samples_per_s": samples_per_s, "data_wait_s": 0.1 * step_s * 150,
                "compute_s": 0.9 * step_s * 150, "communication_s": 0.0, "round_samples_per_s": rounds}

    recorded = {"machine": {"device": "a GPU", "date": "today"}, "job": {"steps": 200, "log_interval": 50},
                "variants": {"mlp": run(100_000, 0.00256, [100_000, 90_000], False),  # batch 256
                             "mlp ddp comm hook none": run(80_000, 0.0032, [70_000, 80_000], True),
                             "act": run(2_000, 0.032, [2_000, 1_900], False),  # batch 64
                             "act ddp": run(1_600, 0.04, [1_500, 1_600], True)}}
    path = tmp_path / "gpu_ddp_cost.json"
    path.write_text(json.dumps(recorded))
    gpu = gpu_figures(path, {"mlp": TRUE_COSTS["mlp"]})

    assert set(gpu["checks"]) == {"mlp", "act"}  # no diffusion runs recorded
    assert gpu["checks"]["mlp"]["error"] == pytest.approx(0.25)
    assert gpu["checks"]["mlp"]["ddp_adds_s"] == pytest.approx(0.00064)
    assert gpu["checks"]["act"]["ddp_adds_s"] == pytest.approx(0.008)
    assert gpu["checks"]["act"]["rounds"] == {"without_ddp": [2_000, 1_900], "ddp": [1_500, 1_600]}
    assert "break_even_bytes_per_s" in gpu["policies"]["mlp"] and "break_even_bytes_per_s" not in gpu["policies"]["act"]
    text = "\n".join(gpu_text(gpu, "gpu_ddp_cost.json"))
    assert "| mlp | 90000-100000 | 70000-80000 | 100000 | +25% | 0.64 ms | 0.26 / 0.32 ms |" in text
    assert "| act | 1900-2000 | 1500-1600 | 2000 | +25% | 8.00 ms | 3.20 / 4.00 ms |" in text
    assert "Each variant ran once" not in text  # the rounds give the spread
    assert gpu_figures(tmp_path / "absent.json", {}) is None
