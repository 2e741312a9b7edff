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
batches share that cost instead of each paying it; the batches are the same as without blocks.

The blocks run on from one epoch into the next (``EpochBlocks``): the workers start on
the next epoch's first blocks while the trainer finishes this one, instead of idling
at every epoch boundary until a new pass asks for data. On a small fleet, whose
epochs last tens of milliseconds, that stall cost 2 workers a quarter of their windows
a second (0.88 M against 1.2 M on the loader benchmark's fleet).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, Sampler

DEFAULT_WORKERS = 2
BLOCK_BYTES = 8 * 2**20  # a block of batches fetched (and handed over by a worker) at once
MAX_BATCHES_PER_BLOCK = 32  # low-dim batches are small: a block needs many to outweigh its hand-over


def distributed_rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)`` of the process group, or ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class EpochBlocks(Sampler[list[int]]):
    """Blocks of ``block_size`` sample indices, epoch after epoch without end, from ``first_epoch`` on.

    Each epoch is the sampler's order for that epoch (``set_epoch``) cut into blocks;
    its last block may be short, so a block never mixes two epochs.
    """

    def __init__(self, sampler: DistributedSampler, block_size: int):
        self.sampler, self.block_size, self.first_epoch = sampler, block_size, 0

    @property
    def blocks_per_epoch(self) -> int:
        return -(-len(self.sampler) // self.block_size)

    def __iter__(self) -> Iterator[list[int]]:
        for epoch in itertools.count(self.first_epoch):
            self.sampler.set_epoch(epoch)
            yield from BatchSampler(self.sampler, self.block_size, drop_last=False)


class EpochLoader:
    """Batches of a DataLoader of blocks, one epoch per pass: each pass is a fresh shuffle all ranks agree on.

    Each ``iter(loader)`` yields epoch ``loader.epoch`` and then advances it. One
    iterator of the DataLoader runs through all the epochs (see ``EpochBlocks``); it
    is started again at ``loader.epoch`` only where a pass did not run to its end or
    ``set_epoch`` moved the epoch, as a resumed run does once to carry on from epoch ``e``.
    """

    def __init__(self, loader: DataLoader, blocks: EpochBlocks, batch_size: int, drop_last: bool):
        self.loader, self.blocks, self.sampler, self.epoch = loader, blocks, blocks.sampler, 0
        self.batch_size, self.drop_last = batch_size, drop_last
        self._stream: Iterator[dict[str, torch.Tensor]] | None = None
        self._stream_epoch = -1  # the epoch whose first block the stream gives next

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        if self._stream_epoch != self.epoch:
            self.blocks.first_epoch = self.epoch
            self._stream = iter(self.loader)
        self._stream_epoch, self.epoch = -1, self.epoch + 1
        for _ in range(self.blocks.blocks_per_epoch):
            block = next(self._stream)
            size = len(next(iter(block.values())))
            for start in range(0, size, self.batch_size):
                if self.drop_last and start + self.batch_size > size:
                    break  # only the epoch's last block can end short
                yield {key: value[start: start + self.batch_size] for key, value in block.items()}
        self._stream_epoch = self.epoch

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
    handing a batch from a worker to the trainer (docs/performance.md),
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
                         "(lower --batch-size; from Python, drop_last=False keeps the short batch)")
    blocks = EpochBlocks(sampler, block_size=batch_size * batches_per_block(dataset, batch_size))
    workers = {"persistent_workers": True, "prefetch_factor": prefetch_factor} if num_workers > 0 else {}
    loader = DataLoader(
        dataset,
        sampler=blocks,
        batch_size=None,  # the dataset gathers a whole block per index list
        num_workers=num_workers,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        **workers,
    )
    return EpochLoader(loader, blocks, batch_size, drop_last)
