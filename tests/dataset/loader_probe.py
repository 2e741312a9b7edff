"""Run under torchrun (or plain python): record which samples this rank's loader yields in two epochs.

    torchrun --nproc_per_node=2 tests/dataset/loader_probe.py STORE OUT_DIR NUM_WORKERS
"""

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset.loader import distributed_rank_and_world, make_dataloader
from dataset.windows import FleetWindowDataset, WindowSpec


def sample_keys(batch) -> list[list[int]]:
    return [[int(r), int(e), int(f)] for r, e, f in zip(batch["robot_id"], batch["episode_index"], batch["frame_index"])]


def main(store_path: str, out_dir: str, num_workers: str) -> None:
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    store = FleetStore.open(store_path)
    dataset = FleetWindowDataset(store, select_episodes(store), WindowSpec.of(2, 4, store.features))
    loader = make_dataloader(dataset, batch_size=8, seed=3, num_workers=int(num_workers), drop_last=False)
    epochs = [[key for batch in loader for key in sample_keys(batch)] for _ in range(2)]
    rank, world_size = distributed_rank_and_world()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"world_size": world_size, "epochs": epochs,
                                                             "dataset_size": len(dataset)}))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
