"""make_dataloader: a DistributedSampler partition that is disjoint and complete, under torchrun and alone."""

import json
import subprocess
import sys

import pytest
import torch

from collect_helpers import REPO, subprocess_env
from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset import loader as loader_module
from dataset.loader import make_dataloader
from dataset.windows import FleetWindowDataset, WindowSpec

PROBE = REPO / "tests" / "dataset" / "loader_probe.py"


def windows(path) -> FleetWindowDataset:
    store = FleetStore.open(path)
    return FleetWindowDataset(store, select_episodes(store), WindowSpec.of(2, 4, store.features))


def run_probe(store, out, *launcher: str, workers: int = 0) -> list[dict]:
    out.mkdir()
    command = [*launcher, str(PROBE), str(store), str(out), str(workers)]
    completed = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]


def test_one_process_sees_every_sample_once_per_epoch_in_a_new_order(pick_place_fleet):
    dataset = windows(pick_place_fleet)
    loader = make_dataloader(dataset, batch_size=16, num_workers=0, drop_last=False)
    orders = []
    for _ in range(2):
        batches = list(loader)
        assert all(batch["action"].shape[1:] == (4, 5) for batch in batches)
        orders.append(torch.cat([b["frame_index"] * 10_000 + b["robot_id"] * 100 + b["episode_index"]
                                 for b in batches]))
    assert loader.epoch == 2
    assert len(orders[0]) == len(dataset) == len(set(orders[0].tolist()))
    assert sorted(orders[0].tolist()) == sorted(orders[1].tolist()) and not torch.equal(orders[0], orders[1])


def test_worker_processes_give_the_same_batches_as_the_main_process(pick_place_fleet):
    dataset = windows(pick_place_fleet)
    in_process = list(make_dataloader(dataset, batch_size=32, num_workers=0, seed=5))
    with_workers = list(make_dataloader(dataset, batch_size=32, num_workers=2, seed=5))
    assert len(in_process) == len(with_workers) == len(dataset) // 32
    for a, b in zip(in_process, with_workers):
        for key in a:
            torch.testing.assert_close(a[key], b[key])


@pytest.mark.parametrize("drop_last", [True, False])
def test_blocks_of_batches_give_the_same_batches_as_one_batch_at_a_time(pick_place_fleet, monkeypatch, drop_last):
    dataset = windows(pick_place_fleet)
    assert loader_module.batches_per_block(dataset, 16) > 1
    blocked = make_dataloader(dataset, batch_size=16, num_workers=0, drop_last=drop_last)
    monkeypatch.setattr(loader_module, "MAX_BATCHES_PER_BLOCK", 1)
    single = make_dataloader(dataset, batch_size=16, num_workers=0, drop_last=drop_last)
    blocked_batches, single_batches = list(blocked), list(single)
    assert len(blocked_batches) == len(single_batches) == len(blocked) == len(single)
    assert [len(b["action"]) for b in blocked_batches][-1] == (16 if drop_last else len(dataset) % 16)
    for a, b in zip(blocked_batches, single_batches):
        for key in a:
            torch.testing.assert_close(a[key], b[key])


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("workers", [0, 2])
def test_two_torchrun_ranks_partition_each_epoch_disjointly_and_completely(pick_place_fleet, tmp_path, workers):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    ranks = run_probe(pick_place_fleet, tmp_path / "ranks", *torchrun, workers=workers)
    assert [rank["world_size"] for rank in ranks] == [2, 2]
    size = ranks[0]["dataset_size"]
    for epoch in range(2):
        seen = [{tuple(key) for key in rank["epochs"][epoch]} for rank in ranks]
        assert seen[0].isdisjoint(seen[1])
        # The sampler drops len % world_size samples rather than hand one to both ranks.
        assert len(seen[0]) == len(seen[1]) == size // 2
        assert len(seen[0] | seen[1]) == size - size % 2
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # set_epoch reshuffles


def test_without_a_process_group_the_loader_serves_everything(pick_place_fleet, tmp_path):
    [alone] = run_probe(pick_place_fleet, tmp_path / "alone", sys.executable)
    assert alone["world_size"] == 1 and len(alone["epochs"][0]) == alone["dataset_size"]


def test_impossible_batches_are_refused(pick_place_fleet):
    dataset = windows(pick_place_fleet)
    with pytest.raises(ValueError, match="larger than"):
        make_dataloader(dataset, batch_size=len(dataset) + 1, num_workers=0)


def epoch_keys(batches) -> list[tuple[int, int, int]]:
    return [(int(r), int(e), int(f)) for b in batches
            for r, e, f in zip(b["robot_id"], b["episode_index"], b["frame_index"])]


@pytest.mark.parametrize("workers", [0, 2])
def test_epochs_run_on_from_one_stream_as_if_each_started_afresh(pick_place_fleet, workers):
    """The blocks of epoch e+1 are fetched ahead while epoch e is read; each epoch still equals a fresh start
    at it (set_epoch), and a pass left early leaves no blocks behind for the next one."""
    dataset = windows(pick_place_fleet)
    streamed = make_dataloader(dataset, batch_size=16, num_workers=workers, drop_last=False)
    epochs = [epoch_keys(streamed) for _ in range(3)]
    for _ in zip(range(2), streamed):  # a pass of epoch 3 left after two batches
        pass
    epochs.append(epoch_keys(streamed))  # epoch 4, from its start
    assert streamed.epoch == 5
    for epoch in (0, 2, 4):
        fresh = make_dataloader(dataset, batch_size=16, num_workers=0, drop_last=False)
        fresh.set_epoch(epoch)
        assert epoch_keys(fresh) == epochs[epoch if epoch < 4 else 3]
    assert len(set(epochs[0])) == len(epochs[0]) == len(dataset) and epochs[0] != epochs[1]
