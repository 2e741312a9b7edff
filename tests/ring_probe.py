"""Run under torchrun: ``train.socket_ring.SocketRing`` against gloo's exact sums, then its failure paths.

    torchrun --nproc_per_node=3 tests/ring_probe.py OUT_DIR

Each rank fills tensors of several sizes (fewer elements than ranks included) and dtypes
with values of its own, sums them with the ring and with gloo, and rank 0 writes
OUT_DIR/ring.json: per case, the largest difference from gloo's float64 sum (relative to
the largest sum, in units of the dtype's epsilon) and whether every
rank ended with the same bytes. Then rank 0 waits alone on a second ring (a timeout),
and the last rank closes its connections while the others sum (a lost neighbour).
"""

import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from train.socket_ring import SocketRing

SIZES = (1, 2, 1000, 100_003)
DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ring = SocketRing()
    generator = torch.Generator().manual_seed(rank)
    results = {}
    for dtype in DTYPES:
        for size in SIZES:
            values = (torch.randn(size, generator=generator, dtype=torch.float64) * (rank + 1)).to(dtype)
            exact = values.to(torch.float64, copy=True)
            dist.all_reduce(exact)
            summed = ring.all_reduce_(values.clone())
            gathered = [torch.zeros_like(summed.double()) for _ in range(world_size)]
            dist.all_gather(gathered, summed.double())
            results[f"{dtype} x {size}"] = {
                "error_in_eps": ((summed.double() - exact).abs().max() / exact.abs().max()).item()
                / torch.finfo(dtype).eps,
                "ranks_agree": all(torch.equal(g, gathered[0]) for g in gathered)}

    lonely = SocketRing(timeout=timedelta(seconds=1))
    if rank == 0:  # the others never join this sum
        try:
            lonely.all_reduce_(torch.ones(10))
        except TimeoutError as error:
            results["timeout"] = str(error)
    dist.barrier()

    errors = None
    if rank == world_size - 1:
        ring.close()
    else:
        try:
            ring.all_reduce_(torch.ones(1000))
        except ConnectionError as error:
            errors = f"{type(error).__name__}: {error}"
        ring.close()  # as a failed rank's exit would: the error travels on round the ring
    lost = [None] * world_size
    dist.all_gather_object(lost, errors if rank < world_size - 1 else None)
    results["lost_neighbour"] = lost[:-1]
    if rank == 0:
        Path(out_dir, "ring.json").write_text(json.dumps(results, indent=2))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
