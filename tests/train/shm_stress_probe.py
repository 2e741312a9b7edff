"""Run under torchrun: the shared-memory all-reduce against gloo's, over many random steps.

    torchrun --nproc_per_node=N tests/train/shm_stress_probe.py STEPS OUT_DIR

Every step draws (from a generator all ranks seed alike) a dtype, a size from 1 element
to several slots (4 KiB slots, so most tensors go through in pieces), a sum or a mean,
and which ranks pause before the call (so ranks run ahead of each other and the slot
turns are used while a slow rank still reads). Each rank sums its own random values with
``SharedMemoryAllReduce`` and with gloo in float64. Rank 0 writes OUT_DIR/stress.json:
the steps, the largest difference from gloo (relative to the step's largest value, in
units of the dtype's epsilon) and the number of steps where the ranks' bytes differ.
"""

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from train.comm.shm_all_reduce import SharedMemoryAllReduce

DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def main(steps: str, out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    shared = SharedMemoryAllReduce.connect(4096)
    plan = torch.Generator().manual_seed(0)  # the same draws on every rank
    values_of_rank = torch.Generator().manual_seed(1000 + rank)
    worst, disagreements = 0.0, 0
    for _ in range(int(steps)):
        dtype = DTYPES[int(torch.randint(len(DTYPES), (1,), generator=plan))]
        size = int(torch.randint(1, 5 * 4096 // 4, (1,), generator=plan))
        scale = 1.0 if torch.rand(1, generator=plan) < 0.5 else 1 / world_size
        pauses = torch.rand(world_size, generator=plan) < 0.2
        values = (torch.randn(size, generator=values_of_rank, dtype=torch.float64) * (rank + 1)).to(dtype)
        exact = values.to(torch.float64, copy=True)
        dist.all_reduce(exact)
        exact *= scale
        if pauses[rank]:
            time.sleep(float(torch.rand(1, generator=values_of_rank)) * 3e-3)
        summed = shared.all_reduce_(values, scale=scale).double()
        worst = max(worst, ((summed - exact).abs().max() / exact.abs().max()).item() / torch.finfo(dtype).eps)
        gathered = [torch.zeros_like(summed) for _ in range(world_size)]
        dist.all_gather(gathered, summed)
        disagreements += not all(torch.equal(g, gathered[0]) for g in gathered)
    if rank == 0:
        Path(out_dir, "stress.json").write_text(json.dumps(
            {"steps": int(steps), "max_error_in_eps": worst, "steps_ranks_disagree": disagreements}))
    shared.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
