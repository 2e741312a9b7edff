"""Run under torchrun: each comm hook's averaged gradients against the exact mean of the ranks' gradients.

    torchrun --nproc_per_node=2 tests/train/comm_hook_probe.py OUT_DIR

Every rank backpropagates its own batch through a small MLP wrapped in DDP (small buckets,
so a backward sends several) with each hook of ``train.comm.comm_hooks`` (``auto`` is ``shm``
here, so it is left out), three times (PowerSGD compresses from its second step on).
Rank 0 writes OUT_DIR/hooks.json: per hook, the largest error against the exact mean,
the largest gradient, and whether all ranks ended with the same gradients.
"""

import copy
import gc
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from train.comm.comm_hooks import COMM_HOOKS, register_comm_hook


def flat_gradients(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in module.parameters()])


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    template = torch.nn.Sequential(torch.nn.Linear(60, 256), torch.nn.GELU(), torch.nn.Linear(256, 80))
    generator = torch.Generator().manual_seed(100 + rank)
    inputs = torch.randn(64, 60, generator=generator) * (1 + rank)  # the ranks' gradients differ in size

    # the exact mean of the ranks' gradients, from plain backward passes and an all-reduce
    reference = copy.deepcopy(template)
    reference(inputs).pow(2).mean().backward()
    local = flat_gradients(reference)
    exact = local.clone()
    dist.all_reduce(exact)
    exact /= world_size
    largest = local.abs().max().reshape(1)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)

    results = {}
    for name in (hook for hook in COMM_HOOKS if hook != "auto"):
        model = copy.deepcopy(template)
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.02)
        register_comm_hook(ddp, name, torch.device("cpu"), powersgd_rank=2, powersgd_start_iter=2)
        for _ in range(3):
            model.zero_grad()
            ddp(inputs).pow(2).mean().backward()
        averaged = flat_gradients(model)
        gathered = [torch.zeros_like(averaged) for _ in range(world_size)]
        dist.all_gather(gathered, averaged)
        results[name] = {"max_error": (averaged - exact).abs().max().item(), "max_gradient": largest.item(),
                         "finite": bool(torch.isfinite(averaged).all()),
                         "ranks_agree": all(torch.equal(g, gathered[0]) for g in gathered)}

    if rank == 0:
        Path(out_dir, "hooks.json").write_text(json.dumps(results, indent=2))
    # The DDP models go before their process group: torch can abort at exit while a DDP with a comm
    # hook is still alive, and DDP objects sit in reference cycles, so only a collection frees them.
    del ddp
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
