"""An all-reduce through shared memory, for ranks on one host: the transport of the ``shm`` comm hook.

This is the default between CPU ranks that share a host (``train/comm/comm_hooks.py``); the
socket ring (``train/comm/socket_ring.py``) serves ranks on several hosts.

Why: between two ranks of a small VM, what the socket ring's all-reduce costs is not the
bytes but waking the rank that waits for its neighbour's bytes (docs/performance.md). Here
every rank maps one memory segment, copies its tensor into its own slot, publishes how
many calls it has made, and spins until every rank has published the same call; then each
rank sums the slots in rank order, so all of them end with the same bytes. Nothing sleeps
and nothing is woken while the ranks keep pace.

- **Memory order.** A rank writes its slot, then its call counter; a reader reads the
  counter, then the slot. x86-64 keeps stores in order and loads in order, so a rank that
  sees a counter sees the data written before it. Other architectures need memory fences
  that Python cannot issue, so ``connect`` declines there.
- **Slots.** Two sets, used by turns: a rank starts call c+2 only after every rank has
  published call c+1, which each does after it has read call c, so no slot is written
  while it is read. A tensor larger than a slot goes through in pieces, one call each.
- **The segment.** Rank 0 creates a file in /dev/shm and reserves its size (so a full
  /dev/shm fails here, not with SIGBUS later); every rank maps it and checks a token rank
  0 wrote into it (ranks on other hosts find no such file), and rank 0 unlinks it once all
  have mapped it, so nothing is left behind, even after a crash.
- **Waiting.** A rank spins, yielding its core to any other runnable thread, for up to
  ``spin_s``; past that it sleeps 0.1 ms at a time, checks that the ranks it waits for are
  alive, and gives up after ``timeout`` (gloo's default, 30 minutes). Each rank holds a
  lock on one byte of the segment's file, which the kernel drops when the rank's process
  exits, however it exits: a lock nobody holds is a rank that is gone.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import platform
import secrets
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

SHM_DIR = Path("/dev/shm")
HEADER_BYTES = 4096  # rank 0's token, then each rank's call counter: int64 each
MAX_SLOT_BYTES = 4 << 20  # per rank and turn


class SharedMemoryAllReduce:
    """Sums CPU tensors over the ranks of a process group through one shared memory segment.

    Build it with ``connect`` on every rank at the same point. ``all_reduce_`` sums a
    contiguous tensor in place (times a scale, which averages it); a rank whose awaited rank has exited raises
    ``ConnectionError``, and one that waits longer than ``timeout`` ``TimeoutError``.
    """

    def __init__(self, descriptor: int, segment: mmap.mmap, rank: int, world_size: int, slot_bytes: int,
                 timeout: timedelta, spin_s: float):
        self.rank, self.world_size, self.slot_bytes = rank, world_size, slot_bytes
        self.timeout_s, self.spin_s = timeout.total_seconds(), spin_s
        self._descriptor, self._segment = descriptor, segment
        self._calls_published = np.frombuffer(segment, dtype=np.int64, count=world_size, offset=8)
        self._slots = torch.frombuffer(segment, dtype=torch.uint8, offset=HEADER_BYTES,
                                       count=2 * world_size * slot_bytes).view(2, world_size, slot_bytes)
        self._typed_slots: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}  # per dtype: both turns
        self._calls = 0

    @classmethod
    def connect(cls, slot_bytes: int, group: dist.ProcessGroup | None = None,
                timeout: timedelta = timedelta(minutes=30), spin_s: float = 0.002) -> SharedMemoryAllReduce | None:
        """Map one segment on every rank of ``group``, or return None on every rank where they cannot share one.

        ``slot_bytes`` is the most one call sends whole (at most 4 MiB): the gradients' size
        puts the default mlp's in one call. The ranks cannot share a segment across hosts,
        off x86-64, or where /dev/shm lacks the room (``2 x world size x slot_bytes``). A
        collective: every rank calls it at the same point and all get the same answer.
        """
        rank, world_size = dist.get_rank(group), dist.get_world_size(group)
        slot_bytes = max(16, min(slot_bytes, MAX_SLOT_BYTES)) // 16 * 16  # whole elements of any dtype
        size = HEADER_BYTES + 2 * world_size * slot_bytes
        offer = [None]  # rank 0's file and token, or None where it could not make one
        if rank == 0 and platform.machine().lower() in ("x86_64", "amd64"):
            offer = [create_segment_file(size)]
        dist.broadcast_object_list(offer, group=group, group_src=0)
        mapped = map_segment(*offer[0], size, rank) if offer[0] else None
        everyone = [None] * world_size
        dist.all_gather_object(everyone, mapped is not None, group=group)  # also: every rank's lock is taken
        if rank == 0 and offer[0]:
            os.unlink(offer[0][0])  # every rank has mapped it or given up: the mappings outlive the name
        if not all(everyone):
            if mapped is not None:
                mapped[1].close()
                os.close(mapped[0])
            return None
        return cls(*mapped, rank, world_size, slot_bytes, timeout, spin_s)

    def all_reduce_(self, tensor: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """Sum ``scale`` x the contiguous CPU ``tensor`` over the ranks, in place; returns it.

        ``scale=1 / world_size`` averages: the scaling rides on the copy into this rank's
        slot instead of taking a pass of its own over the gradients. With a
        power-of-two scale the bytes are those of scaling the sum afterwards.
        """
        if self.world_size == 1:
            return tensor.mul_(scale)
        flat = tensor.view(-1)
        if flat.dtype not in self._typed_slots:  # a view per dtype, kept: building it costs as much as a copy
            self._typed_slots[flat.dtype] = tuple(self._slots[turn].view(flat.dtype) for turn in (0, 1))
        per_call = self.slot_bytes // flat.element_size()
        for start in range(0, flat.numel(), per_call):
            piece = flat[start: start + per_call]
            self._calls += 1
            slots = self._typed_slots[flat.dtype][self._calls % 2][:, : piece.numel()]
            torch.mul(piece, scale, out=slots[self.rank])
            self._calls_published[self.rank] = self._calls
            self._wait_for_all()
            torch.add(slots[0], slots[1], out=piece)  # in rank order on every rank: the same bytes everywhere
            for slot in slots[2:]:
                piece.add_(slot)
        return tensor

    def close(self) -> None:
        self._slots = self._calls_published = self._typed_slots = None  # views into the segment must go before it
        self._segment.close()
        os.close(self._descriptor)  # and with it this rank's lock

    def _wait_for_all(self) -> None:
        """Return once every rank has published ``self._calls``."""
        started = time.perf_counter()
        while (self._calls_published < self._calls).any():
            waited = time.perf_counter() - started
            if waited < self.spin_s:
                os.sched_yield()
                continue
            late = np.flatnonzero(self._calls_published < self._calls).tolist()
            for rank in late:
                if not self._alive(rank):
                    raise ConnectionError(f"shared-memory all-reduce: rank {rank} exited while rank {self.rank} "
                                          f"waited for it")
            if waited > self.timeout_s:
                raise TimeoutError(f"shared-memory all-reduce: rank {self.rank} waited {self.timeout_s:.0f} s "
                                   f"for ranks {late}")
            time.sleep(1e-4)

    def _alive(self, rank: int) -> bool:
        """Whether ``rank`` still holds its lock (its byte of the file)."""
        try:
            fcntl.lockf(self._descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, rank)
        except OSError:
            return True
        fcntl.lockf(self._descriptor, fcntl.LOCK_UN, 1, rank)
        return False


def create_segment_file(size: int) -> tuple[str, int] | None:
    """A new file of ``size`` reserved bytes in /dev/shm with a random token at its start, or None without room."""
    path = SHM_DIR / f"robofleet-allreduce-{os.getpid()}-{secrets.token_hex(4)}"
    token = secrets.randbits(62)
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except OSError:
        return None
    try:
        os.posix_fallocate(descriptor, 0, size)
        os.pwrite(descriptor, token.to_bytes(8, "little"), 0)
    except OSError:
        path.unlink()
        return None
    finally:
        os.close(descriptor)
    return str(path), token


def map_segment(path: str, token: int, size: int, rank: int) -> tuple[int, mmap.mmap] | None:
    """``path`` opened, locked at byte ``rank`` and mapped, if it is rank 0's segment (``token`` at its start)."""
    try:
        descriptor = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        segment = mmap.mmap(descriptor, size)
    except (OSError, ValueError):  # no memory left to map, or a shorter file of the same name
        os.close(descriptor)
        return None
    if int.from_bytes(segment[:8], "little") != token:
        segment.close()
        os.close(descriptor)
        return None
    fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, rank)
    return descriptor, segment
