"""Monitoring: metrics.jsonl timing fields, TensorBoard events, Weights & Biases offline, the curve, warnings."""

import json

import pytest

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from train.config import TrainConfig
from train.monitor import Monitor, read_records, sync_efficiency
from train_helpers import metrics, train

TIMING = ("samples_per_s", "data_wait_s", "compute_s", "communication_s", "sync_efficiency")


@pytest.mark.slow
def test_a_run_writes_metrics_tensorboard_wandb_offline_and_a_curve(pick_place_fleet, tmp_path):
    run = tmp_path / "run"
    completed = train("--data", pick_place_fleet, "--out", run, "--max-steps", "10", "--amp", "bf16",
                      "--wandb", "--wandb-mode", "offline")
    assert completed.returncode == 0, completed.stderr[-3000:]
    records = [record for record in metrics(run) if "loss" in record]
    assert [record["step"] for record in records] == [5, 10] and "val_loss" in records[-1]
    for record in records:
        assert set(TIMING) <= set(record)
        assert record["compute_s"] > 0 and record["data_wait_s"] >= 0 and record["samples_per_s"] > 0
        assert record["communication_s"] == 0 and record["sync_efficiency"] == 1.0  # one process

    [events] = (run / "tensorboard").glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    assert {"loss", "val_loss", "lr", "sync_efficiency", "communication_s"} <= set(accumulator.Tags()["scalars"])
    assert [event.step for event in accumulator.Scalars("loss")] == [5, 10]

    assert (run / "training_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(run.glob("wandb/offline-run-*/run-*.wandb")), sorted(p.name for p in run.rglob("*"))


def test_sync_efficiency_is_the_compute_share_and_a_low_one_warns(tmp_path, capsys):
    assert sync_efficiency(3.0, 1.0) == 0.75 and sync_efficiency(0.0, 0.0) == 1.0
    monitor = Monitor(tmp_path, TrainConfig(), start_step=0)
    monitor.log({"step": 1, "loss": 0.5, "sync_efficiency": 0.8})
    assert "warning" not in capsys.readouterr().err
    monitor.log({"step": 2, "loss": 0.4, "sync_efficiency": 0.6})
    monitor.close()
    error = capsys.readouterr().err
    assert "warning: sync efficiency 0.60 is below 0.7" in error and error.count("\n") == 1


def test_a_resumed_run_drops_the_records_it_will_redo(tmp_path):
    """A crash after step 30's checkpoint left records up to 40 and half a line; resuming at 30 keeps 10..30."""
    lines = [json.dumps({"step": step, "loss": 1.0 / step}) for step in (10, 20, 30, 40)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 5')
    Monitor(tmp_path, TrainConfig(), start_step=30).close()
    assert [record["step"] for record in read_records(tmp_path / "metrics.jsonl")] == [10, 20, 30]
