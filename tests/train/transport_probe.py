"""Run under torchrun: one of bc.py's CPU all-reduce transports against gloo's exact sums, then its failure paths.

    torchrun --nproc_per_node=3 tests/train/transport_probe.py {ring,shm} OUT_DIR

``ring`` is ``train.comm.socket_ring.SocketRing``, ``shm`` ``train.comm.shm_all_reduce.SharedMemoryAllReduce``
(with 4 KiB slots, so the larger tensors go through in pieces). Each rank fills tensors of
several sizes (fewer elements than ranks included) and dtypes with values of its own, sums
them (and averages them: ``scale=1/world_size``) with the transport and with gloo, and rank
0 writes OUT_DIR/sums.json: per case, the largest difference from gloo's float64 result
(relative to its largest value, in units of the dtype's epsilon) and whether every rank
ended with the same bytes. For ``shm`` it adds
what ``connect`` gives where the ranks cannot share a segment (no /dev/shm; the last rank
unable to open it, as on another host), what ``auto`` and ``shm`` make of the first case
in ``register_comm_hook``, and the segment files left in /dev/shm.

Then the failure paths: rank 0 waits alone on a second transport with a 1 s timeout, and
the last rank exits while the others sum; each of them writes the error it got to
OUT_DIR/lost_by_rank_R.txt.
"""

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import train.comm.shm_all_reduce as shm
from train.comm.comm_hooks import register_comm_hook
from train.comm.socket_ring import SocketRing

SIZES = (1, 2, 1000, 100_003)
DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def connect(transport: str, timeout: timedelta = timedelta(minutes=30)):
    if transport == "ring":
        return SocketRing(timeout=timeout)
    return shm.SharedMemoryAllReduce.connect(4096, timeout=timeout)


def sums(transport) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(rank)
    results = {}
    for dtype in DTYPES:
        for size in SIZES:
            for scale, case in ((1.0, "sum"), (1 / world_size, "mean")):
                values = (torch.randn(size, generator=generator, dtype=torch.float64) * (rank + 1)).to(dtype)
                exact = values.to(torch.float64, copy=True)
                dist.all_reduce(exact)
                exact *= scale
                summed = transport.all_reduce_(values.clone(), scale=scale)
                gathered = [torch.zeros_like(summed.double()) for _ in range(world_size)]
                dist.all_gather(gathered, summed.double())
                results[f"{case} of {dtype} x {size}"] = {
                    "error_in_eps": ((summed.double() - exact).abs().max() / exact.abs().max()).item()
                    / torch.finfo(dtype).eps,
                    "ranks_agree": all(torch.equal(g, gathered[0]) for g in gathered)}
    return results


def unshareable() -> dict:
    """What ``connect`` gives, and the comm hooks do, where the ranks cannot share a segment."""
    real_dir, real_map = shm.SHM_DIR, shm.map_segment
    shm.SHM_DIR = Path("/nonexistent-shm")
    without_dev_shm = shm.SharedMemoryAllReduce.connect(4096)
    auto_becomes = register_comm_hook(DistributedDataParallel(torch.nn.Linear(4, 4)), "auto", torch.device("cpu"))
    try:
        register_comm_hook(DistributedDataParallel(torch.nn.Linear(4, 4)), "shm", torch.device("cpu"))
        shm_refusal = None
    except ValueError as error:
        shm_refusal = str(error)
    shm.SHM_DIR = real_dir
    if dist.get_rank() == dist.get_world_size() - 1:
        shm.map_segment = lambda *args: None
    one_rank_elsewhere = shm.SharedMemoryAllReduce.connect(4096)
    shm.map_segment = real_map
    return {"without_dev_shm": without_dev_shm is None, "one_rank_elsewhere": one_rank_elsewhere is None,
            "auto_becomes": auto_becomes, "shm_refusal": shm_refusal}


def main(name: str, out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    transport = connect(name)
    results = {"sums": sums(transport)}
    if name == "shm":
        connected = [None] * world_size
        dist.all_gather_object(connected, unshareable())
        results["unshareable"] = connected
        dist.barrier()
        results["segment_files_left"] = [f.name for f in shm.SHM_DIR.glob("robofleet-allreduce-*")]

    lonely = connect(name, timeout=timedelta(seconds=1))
    if rank == 0:  # the others never join this sum
        try:
            lonely.all_reduce_(torch.ones(10))
        except TimeoutError as error:
            results["timeout"] = str(error)
        Path(out_dir, "sums.json").write_text(json.dumps(results, indent=2))
    dist.barrier()

    if rank == world_size - 1:
        os._exit(0)  # no goodbye: as a rank that dies would
    try:
        transport.all_reduce_(torch.ones(1000))
        error = None
    except ConnectionError as raised:
        error = f"{type(raised).__name__}: {raised}"
    transport.close()  # as a failed rank's exit would: the ring passes the error on
    Path(out_dir, f"lost_by_rank_{rank}.txt").write_text(str(error))
    os._exit(0)  # the process group has lost a rank: tearing it down could hang


if __name__ == "__main__":
    main(*sys.argv[1:])
