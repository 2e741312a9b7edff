"""DDP communication: every comm hook under 2 gloo ranks, how close each gets to the exact mean, bf16 refusals."""

import json
import math
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from collect_helpers import REPO
from train.comm.comm_hooks import bf16_all_reduce_error, resolve_comm_hook
from train_helpers import metrics, train, train_env

PROBE = REPO / "tests" / "train" / "comm_hook_probe.py"
TRANSPORT_PROBE = REPO / "tests" / "train" / "transport_probe.py"
STRESS_PROBE = REPO / "tests" / "train" / "shm_stress_probe.py"


@pytest.mark.slow
@pytest.mark.cluster
def test_comm_hooks_average_gradients_within_their_precision(tmp_path):
    """Several buckets per backward, ranks with different gradients; errors against the exact mean.

    Tolerances, relative to the largest gradient g: none, shm and ring are exact up to float rounding;
    fp16 keeps 11 significant bits and bf16 8 (one rounding each way: 2^-10 and 2^-7 of g);
    int8 is within half a quantisation step at the coarsest block scale, g / 254 (the
    bound train/comm/compression.py guarantees per rank, so also for their mean); PowerSGD is a
    low-rank approximation: finite, and the same on every rank. Every hook must leave the
    ranks with identical gradients.
    """
    completed = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                str(PROBE), str(tmp_path)], capture_output=True, text=True, env=train_env(),
                               cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    hooks = json.loads((tmp_path / "hooks.json").read_text())
    assert set(hooks) == {"none", "shm", "ring", "fp16", "bf16", "powersgd", "int8"}
    assert all(result["finite"] and result["ranks_agree"] for result in hooks.values()), hooks
    largest = hooks["none"]["max_gradient"]
    assert hooks["none"]["max_error"] <= 1e-6 * largest
    assert hooks["shm"]["max_error"] <= 1e-6 * largest
    assert hooks["ring"]["max_error"] <= 1e-6 * largest
    assert hooks["fp16"]["max_error"] <= 2**-10 * largest
    assert hooks["bf16"]["max_error"] <= 2**-7 * largest
    assert hooks["int8"]["max_error"] <= largest / 254
    assert 0 < hooks["powersgd"]["max_error"] < largest


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("transport", ["ring", "shm"])
def test_cpu_transports_sum_like_gloo_on_three_ranks_and_fail_cleanly(tmp_path, transport):
    """Three ranks (a real ring: each rank's two neighbours differ), sizes below the rank count included.

    Three values summed in two roundings stay within 2 epsilon of the largest sum; every
    rank must hold the same bytes (the ring sums each chunk on one rank, shared memory sums
    the slots in rank order on every rank). A rank left alone times out, and a rank that
    exits makes the others raise, not hang. Where the ranks cannot share a segment, every
    rank learns it (``auto`` then takes the ring, ``shm`` refuses), and no segment file is
    left in /dev/shm.
    """
    completed = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
                                str(TRANSPORT_PROBE), transport, str(tmp_path)], capture_output=True, text=True,
                               env=train_env(), cwd=REPO, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads((tmp_path / "sums.json").read_text())
    sums = results["sums"]
    assert len(sums) == 24
    assert all(result["error_in_eps"] <= 2 and result["ranks_agree"] for result in sums.values()), sums
    lost_by_rank_0, lost_by_rank_1 = ((tmp_path / f"lost_by_rank_{rank}.txt").read_text() for rank in (0, 1))
    if transport == "ring":
        assert results["timeout"] == "ring all-reduce: rank 0 heard nothing from its neighbours for 1 s"
        # rank 0 hears rank 2 close; rank 1 hears rank 0 close, or fails first sending to rank 2 (a reset)
        assert lost_by_rank_0 == "ConnectionError: ring all-reduce: rank 2 closed its connection to rank 0"
        assert lost_by_rank_1.startswith(("ConnectionError", "ConnectionResetError", "BrokenPipeError"))
    else:
        assert results["timeout"] == "shared-memory all-reduce: rank 0 waited 1 s for ranks [1, 2]"
        for rank, lost in enumerate((lost_by_rank_0, lost_by_rank_1)):
            assert lost == f"ConnectionError: shared-memory all-reduce: rank 2 exited while rank {rank} waited for it"
        assert results["unshareable"] == [{
            "without_dev_shm": True, "one_rank_elsewhere": True, "auto_becomes": "ring",
            "shm_refusal": "--comm-hook shm needs every rank on one Linux host, with room in /dev/shm; use ring"}] * 3
        assert results["segment_files_left"] == []


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("ranks", [2, 3])
def test_shared_memory_all_reduce_matches_gloo_over_many_random_steps(tmp_path, ranks):
    """300 steps of random dtypes, sizes (in pieces through small slots), sums and means, with ranks pausing
    at random: every step within 2 epsilon of gloo's float64 result, and the same bytes on every rank."""
    completed = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                f"--nproc_per_node={ranks}", str(STRESS_PROBE), "300", str(tmp_path)],
                               capture_output=True, text=True, env=train_env(), cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    stress = json.loads((tmp_path / "stress.json").read_text())
    assert stress["steps"] == 300 and stress["steps_ranks_disagree"] == 0, stress
    assert stress["max_error_in_eps"] <= 2, stress


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("hook, extra", [
    ("none", ["--grad-accum", "2"]),                           # gloo's all-reduce, into bucket views
    ("ring", ["--bucket-cap-mb", "0.05"]),                     # the socket ring, several buckets a step
    ("fp16", ["--amp", "bf16"]),                               # with bf16 autocast
    ("bf16", ["--lr-scaling", "linear"]),                      # 32 x 2 ranks: lr x 64 / 512
    ("powersgd", ["--grad-accum", "2", "--warmup-steps", "2"]),  # compressing from the third step
    ("int8", ["--ema-decay", "0.9"]),                          # the averages stay in sync too
])
def test_every_comm_hook_trains_two_ranks_in_sync(pick_place_fleet, tmp_path, hook, extra):
    run = tmp_path / hook
    completed = train("--data", pick_place_fleet, "--out", run, "--max-steps", "3", "--log-interval", "1",
                      "--comm-hook", hook, *extra, ranks=2)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert f"comm hook {hook}" in completed.stdout
    records = metrics(run)
    assert records[-1] == {"step": 3, "ranks_in_sync": True, "world_size": 2}
    steps = [record for record in records if "loss" in record]
    assert [record["step"] for record in steps] == [1, 2, 3]
    for record in steps:
        assert math.isfinite(record["loss"]) and record["communication_s"] > 0
        assert 0 < record["sync_efficiency"] < 1
    if hook == "bf16":
        assert "lr 0.000375 (0.003 for batch 512, scaling linear)" in completed.stdout
        assert json.loads((run / "config.json").read_text())["lr"] == pytest.approx(3.75e-4)


def test_bf16_hook_names_a_backend_without_bfloat16(monkeypatch):
    """Old NCCL builds refuse bfloat16 all-reduces (gloo here supports them); the message is one line."""

    def refuse(*args, **kwargs):
        raise RuntimeError("Unsupported dtype BFloat16\nat ProcessGroupNCCL.cpp:123")

    monkeypatch.setattr(dist, "all_reduce", refuse)
    monkeypatch.setattr(dist, "get_backend", lambda *args: "nccl")
    assert bf16_all_reduce_error(torch.device("cpu")) == (
        "--comm-hook bf16 is not supported by this torch build's nccl backend (RuntimeError: Unsupported dtype BFloat16); "
        "use fp16")


def test_auto_picks_shared_memory_on_cpu_and_the_cpu_hooks_refuse_gpus():
    assert resolve_comm_hook("auto", torch.device("cpu")) == "shm"
    assert resolve_comm_hook("auto", torch.device("cuda", 0)) == "none"
    assert resolve_comm_hook("int8", torch.device("cuda", 0)) == "int8"
    for hook in ("shm", "ring"):
        with pytest.raises(ValueError, match=f"^--comm-hook {hook} sums CPU tensors; on GPUs use none \\(nccl\\) or auto$"):
            resolve_comm_hook(hook, torch.device("cuda", 0))
