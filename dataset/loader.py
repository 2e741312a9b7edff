"""``make_dataloader``: batches of windows for one process or for every rank of a DDP job.

A ``DistributedSampler`` decides which samples this rank sees: it is seeded the same
on every rank, so the ranks agree on one permutation and take disjoint slices of it.
Rank and world size come from ``torch.distributed`` when a process group is up (as
under torchrun), else the loader serves the whole dataset to a single process.

Batches are fetched in blocks: a ``BatchSampler`` cuts the sampler's order into
blocks of several consecutive batches, each gathered in one vectorised call
(``FleetWindowDataset`` accepts a list of indices) by one of ``num_workers`` DataLoader
worker processes (alive across epochs, prefetching ahead), then split back into the
batches. Fetching and handing over a block costs about what one batch would, so small
batches come out several times faster; the batches are the same as without blocks.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler

DEFAULT_WORKERS = 2
BLOCK_BYTES = 4 * 2**20  # a block of batches fetched (and handed over by a worker) at once
MAX_BATCHES_PER_BLOCK = 16


def distributed_rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)`` of the process group, or ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class EpochLoader:
    """Batches of a DataLoader of blocks; its DistributedSampler moves to a new epoch on every pass.

    Each ``iter(loader)`` calls ``sampler.set_epoch(loader.epoch)`` and then advances
    ``loader.epoch``, so every pass is a fresh shuffle that all ranks agree on. A
    resumed run calls ``set_epoch(e)`` once to carry on from epoch ``e``.
    """

    def __init__(self, blocks: DataLoader, sampler: DistributedSampler, batch_size: int, drop_last: bool):
        self.blocks, self.sampler, self.epoch = blocks, sampler, 0
        self.batch_size, self.drop_last = batch_size, drop_last

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        for block in self.blocks:
            size = len(next(iter(block.values())))
            for start in range(0, size, self.batch_size):
                if self.drop_last and start + self.batch_size > size:
                    break  # only the epoch's last block can end short
                yield {key: value[start: start + self.batch_size] for key, value in block.items()}

    def __len__(self) -> int:
        full, rest = divmod(len(self.sampler), self.batch_size)
        return full + (rest > 0 and not self.drop_last)


def batches_per_block(dataset: Dataset, batch_size: int) -> int:
    """How many batches to fetch at once: about ``BLOCK_BYTES`` of windows, at most ``MAX_BATCHES_PER_BLOCK``."""
    window_bytes = getattr(dataset, "window_nbytes", 0)
    if not window_bytes:
        return 1
    return max(1, min(MAX_BATCHES_PER_BLOCK, BLOCK_BYTES // (window_bytes * batch_size)))


def make_dataloader(
    dataset: Dataset,
    batch_size: int = 256,
    shuffle: bool = True,
    seed: int = 0,
    num_workers: int | None = None,
    prefetch_factor: int = 4,
    drop_last: bool = True,
    pin_memory: bool | None = None,
) -> EpochLoader:
    """Batches of ``dataset`` for this rank; see the module docstring.

    The sampler drops the last ``len(dataset) % world_size`` samples of each epoch's
    permutation rather than repeating some, so no sample goes to two ranks in one
    epoch. ``drop_last`` drops this rank's final short batch. ``pin_memory`` defaults
    to whether CUDA is available.

    ``num_workers=None`` picks 0 for an in-memory dataset, whose gather costs less than
    handing a batch from a worker to the trainer (~1 ms here; see benchmarks/README.md),
    and ``DEFAULT_WORKERS`` for a streaming one, whose workers overlap chunk reads.
    """
    if num_workers is None:
        num_workers = 0 if getattr(dataset, "mode", None) == "memory" else DEFAULT_WORKERS
    rank, world_size = distributed_rank_and_world()
    if len(dataset) < world_size:
        raise ValueError(f"{len(dataset)} samples cannot be shared by {world_size} ranks")
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                 drop_last=True)
    if drop_last and len(sampler) < batch_size:
        raise ValueError(f"batch size {batch_size} is larger than this rank's {len(sampler)} samples "
                         "(lower --batch-size or pass drop_last=False)")
    blocks = BatchSampler(sampler, batch_size=batch_size * batches_per_block(dataset, batch_size), drop_last=False)
    workers = {"persistent_workers": True, "prefetch_factor": prefetch_factor} if num_workers > 0 else {}
    loader = DataLoader(
        dataset,
        sampler=blocks,
        batch_size=None,  # the dataset gathers a whole block per index list
        num_workers=num_workers,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        **workers,
    )
    return EpochLoader(loader, sampler, batch_size, drop_last)
