"""``make_dataloader``: batches of windows for one process or for every rank of a DDP job.

A ``DistributedSampler`` decides which samples this rank sees: it is seeded the same
on every rank, so the ranks agree on one permutation and take disjoint slices of it.
Rank and world size come from ``torch.distributed`` when a process group is up (as
under torchrun), else the loader serves the whole dataset to a single process.

Batches are cut by a ``BatchSampler`` and fetched in one vectorised gather per batch
(``FleetWindowDataset`` accepts a list of indices), by ``num_workers`` DataLoader
worker processes that stay alive across epochs and prefetch ahead.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler

DEFAULT_WORKERS = 2


def distributed_rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)`` of the process group, or ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class EpochLoader:
    """A DataLoader that moves its DistributedSampler to a new epoch on every pass.

    Each ``iter(loader)`` calls ``sampler.set_epoch(loader.epoch)`` and then advances
    ``loader.epoch``, so every pass is a fresh shuffle that all ranks agree on. A
    resumed run calls ``set_epoch(e)`` once to carry on from epoch ``e``.
    """

    def __init__(self, loader: DataLoader, sampler: DistributedSampler):
        self.loader, self.sampler, self.epoch = loader, sampler, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


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
    batches = BatchSampler(sampler, batch_size=batch_size, drop_last=drop_last)
    if len(batches) == 0:
        raise ValueError(f"batch size {batch_size} is larger than this rank's {len(sampler)} samples "
                         "(lower --batch-size or pass drop_last=False)")
    workers = {"persistent_workers": True, "prefetch_factor": prefetch_factor} if num_workers > 0 else {}
    loader = DataLoader(
        dataset,
        sampler=batches,
        batch_size=None,  # the dataset gathers a whole batch per index list
        num_workers=num_workers,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        **workers,
    )
    return EpochLoader(loader, sampler)
