"""Federated test helpers: a quick config, the metrics of a run, and clients that misbehave on purpose.

The misbehaving clients run on dask workers, which import this module by name: test
clusters' workers have tests/helpers/ on their PYTHONPATH (collect_helpers.subprocess_env).
"""

import json
import time
from pathlib import Path

import numpy as np

from core.options import parse_config
from train.fed.fedavg import ClientJob, ClientUpdate, train_client
from train.fed.federated_config import FederatedConfig

QUICK = ["--hidden", "32", "32", "--batch-size", "16", "--workers", "1", "--quiet"]


def configure(data, out, *arguments) -> FederatedConfig:
    """A small federated config on ``data`` writing to ``out``, with command-line ``arguments`` on top."""
    return parse_config(FederatedConfig, "", ["--data", str(data), "--out", str(out), *QUICK, *map(str, arguments)])


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]


def robot_1_raises(job: ClientJob, weights: np.ndarray) -> ClientUpdate:
    if job.robot_id == 1:
        raise RuntimeError("robot 1 lost its camera")
    return train_client(job, weights)


def robot_2_hangs_in_round_1(job: ClientJob, weights: np.ndarray) -> ClientUpdate:
    if job.robot_id == 2 and job.round == 1:
        time.sleep(3600)
    return train_client(job, weights)


def only_robot_0_works(job: ClientJob, weights: np.ndarray) -> ClientUpdate:
    if job.robot_id != 0:
        raise RuntimeError(f"robot {job.robot_id} is offline")
    return train_client(job, weights)


def slow_and_announced(job: ClientJob, weights: np.ndarray) -> ClientUpdate:
    """A slow robot: it marks that it started (a file in the run directory), then takes a few seconds."""
    (Path(job.config.out) / f"started-round{job.round}-robot{job.robot_id}").touch()
    time.sleep(3)
    return train_client(job, weights)
