"""How gradients travel between DDP ranks: the ``--comm-hook`` choices.

DDP averages gradients bucket by bucket (``--bucket-cap-mb``) while the backward pass is
still running. A communication hook replaces that all-reduce of float32 buckets:

- ``auto`` (the default): ``shm`` between CPU ranks on one host, ``ring`` between CPU
  ranks on several, ``none`` on GPUs.
- ``none``: DDP's own all-reduce (gloo on CPU, nccl on GPU).
- ``shm`` and ``ring``: ours, CPU only (``cpu_all_reduce_hook``): the training thread
  sums the float32 bucket itself, which skips gloo's thread hand-offs: on small CPU
  machines those, not the bytes, are what an all-reduce costs. ``shm`` goes through a
  memory segment all ranks map (``train/comm/shm_all_reduce.py``; ranks on one Linux host),
  ``ring`` is a ring all-reduce over direct TCP sockets (``train/comm/socket_ring.py``; any
  hosts). Both block the backward pass for their bucket, which costs nothing when the
  model fits in one bucket (the default mlp); with several buckets they give up
  overlapping them with the backward, which on CPU ranks sharing their cores saves
  little anyway.
- ``fp16`` / ``bf16``: torch's ``default_hooks.fp16_compress_hook`` / ``bf16_compress_hook``
  cast the bucket to half precision, all-reduce it and cast back (half the bytes). bf16
  needs a backend that all-reduces bfloat16 (NCCL >= 2.10 on a GPU with bf16; gloo in
  recent torch builds); ``register_comm_hook`` checks with a one-element all-reduce and
  raises a one-line error where it is missing.
- ``powersgd``: torch's ``powerSGD_hook`` sends rank-``r`` factors of each gradient matrix
  and keeps the residual for the next step (error feedback). The first ``start_iter``
  steps use a plain all-reduce, as torch recommends. On gloo each bucket is finished
  before the next starts (see ``in_bucket_order``).
- ``int8``: ours (``int8_compress_hook``), because torch's quantization hooks are broken:
  each rank quantises its bucket with ``train.comm.compression.quantize_int8`` (int8 codes plus
  one float32 scale per 1024 values, about a quarter of the bytes), the ranks all-gather
  codes and scales, and every rank dequantises and averages them.
"""

# No ``from __future__ import annotations``: DDP checks a hook's annotations as real objects.
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from core.errors import one_line
from train.comm.compression import dequantize_int8, quantize_int8
from train.comm.shm_all_reduce import SharedMemoryAllReduce
from train.comm.socket_ring import SocketRing

COMM_HOOKS = ("auto", "none", "shm", "ring", "fp16", "bf16", "powersgd", "int8")


def resolve_comm_hook(name: str, device: torch.device) -> str:
    """The hook ``name`` stands for on ``device``: ``auto`` becomes ``shm`` on CPU (``register_comm_hook``
    falls back to ``ring`` where the ranks cannot share memory) and ``none`` on GPU.

    Raises ``ValueError`` with a one-line message for ``shm`` or ``ring`` on a GPU.
    """
    if name == "auto":
        return "shm" if device.type == "cpu" else "none"
    if name in ("shm", "ring") and device.type != "cpu":
        raise ValueError(f"--comm-hook {name} sums CPU tensors; on GPUs use none (nccl) or auto")
    return name


def cpu_all_reduce_hook(transport: SharedMemoryAllReduce | SocketRing,
                        bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average a gradient bucket over the ranks with ``transport``, on this thread; the future is already done."""
    buffer = bucket.buffer()
    # the mean: times the reciprocal (cheaper than a division; exact for a power-of-two world size)
    transport.all_reduce_(buffer, scale=1.0 / transport.world_size)
    done = torch.futures.Future()
    done.set_result(buffer)
    return done


def int8_compress_hook(process_group: dist.ProcessGroup | None,
                       bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average a gradient bucket over the ranks, sending int8 codes and per-block scales.

    Each value of the result is within ``mean over ranks of scale / 2`` of the exact mean,
    where a rank's scale is ``max |g| / 127`` over the 1024-value block the value is in.
    """
    group = process_group if process_group is not None else dist.group.WORLD
    world_size = group.size()
    buffer = bucket.buffer()
    codes, scales = quantize_int8(buffer)
    payload = torch.cat([codes, scales.view(torch.int8)])  # one collective carries both
    gathered = payload.new_empty(world_size * payload.numel())
    work = dist.all_gather_into_tensor(gathered, payload, group=group, async_op=True)

    def average(_) -> torch.Tensor:
        total = torch.zeros(buffer.shape, dtype=torch.float32, device=buffer.device)
        for row in gathered.view(world_size, -1):
            total += dequantize_int8(row[: len(codes)], row[len(codes):].view(torch.float32), total)
        return buffer.copy_(total.div_(world_size))

    return work.get_future().then(average)


def in_bucket_order(hook):
    """``hook`` made to finish each bucket before DDP hands it the next one.

    torch's PowerSGD issues its second and third all-reduce from future callbacks. On gloo
    a callback runs when the previous collective completes, so with several buckets the
    ranks can issue collectives in different orders and hang. Waiting for each bucket keeps
    one order on every rank; on CPU little overlap is lost, since the ranks share the cores.
    """

    def finish_bucket(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        done = torch.futures.Future()
        done.set_result(hook(state, bucket).wait())
        return done

    return finish_bucket


def bf16_all_reduce_error(device: torch.device) -> str | None:
    """Why this process group cannot all-reduce bfloat16 tensors on ``device``, or None when it can."""
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return f"--comm-hook bf16 needs a GPU with bfloat16 ({torch.cuda.get_device_name(device)} has none); use fp16"
    try:
        dist.all_reduce(torch.zeros(1, dtype=torch.bfloat16, device=device))
    except (RuntimeError, ValueError) as error:
        return (f"--comm-hook bf16 is not supported by this torch build's {dist.get_backend()} backend "
                f"({one_line(error)}); use fp16")
    return None


def register_comm_hook(model: DistributedDataParallel, name: str, device: torch.device,
                       powersgd_rank: int = 2, powersgd_start_iter: int = 2) -> str:
    """Make ``model`` send its gradients with hook ``name`` (see the module docstring); returns the hook used
    (``auto`` resolved).

    Raises ``ValueError`` with a one-line message for an unknown name, an unsupported bf16,
    ``shm`` or ``ring`` on a GPU, or ``shm`` where the ranks cannot share memory. Every rank
    must call it (the bf16 check and the set-up of ``shm`` and ``ring`` are collectives).
    """
    if name not in COMM_HOOKS:
        raise ValueError(f"unknown comm hook {name!r}; choose from {', '.join(COMM_HOOKS)}")
    requested, name = name, resolve_comm_hook(name, device)
    if name == "shm":
        gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        shared = SharedMemoryAllReduce.connect(gradient_bytes)
        if shared is None and requested == "shm":
            raise ValueError("--comm-hook shm needs every rank on one Linux host, with room in /dev/shm; use ring")
        if shared is None:
            name, shared = "ring", SocketRing()
        model.register_comm_hook(shared, cpu_all_reduce_hook)
    elif name == "ring":
        model.register_comm_hook(SocketRing(), cpu_all_reduce_hook)
    elif name == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif name == "bf16":
        error = bf16_all_reduce_error(device)
        if error:
            raise ValueError(error)
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif name == "powersgd":
        # start_powerSGD_iter must be > 1 with error feedback (torch asserts it)
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=powersgd_rank,
                                            start_powerSGD_iter=max(2, powersgd_start_iter))
        hook = powerSGD_hook.powerSGD_hook
        model.register_comm_hook(state, in_bucket_order(hook) if dist.get_backend() == "gloo" else hook)
    elif name == "int8":
        model.register_comm_hook(None, int8_compress_hook)
    return name
