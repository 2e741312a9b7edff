"""An all-reduce through shared memory, for ranks on one host: the transport of the ``shm`` comm hook.

This is the default between CPU ranks that share a host (``train/comm/comm_hooks.py``); the
socket ring (``train/comm/socket_ring.py``) serves ranks on several hosts.

Why: between two ranks of a small VM, what the socket ring's all-reduce costs is not the
bytes but waking the rank that waits for its neighbour's bytes (docs/performance.md). Here
every rank maps one memory segment and copies its tensor into its own slot; then it sends
one byte to every other rank over a Unix socket and polls, without blocking, until it has
a byte from each of them; then each rank sums the slots in rank order, so all of them end
with the same bytes. Nothing sleeps and nothing is woken while the ranks keep pace.

- **Memory order.** The byte is what makes a slot safe to read, on every architecture:
  the kernel queues it under a lock that the sender releases after its writes to the slot
  and the receiver acquires before its reads, so the reads see the writes (the guarantee
  that any message through the kernel, a pipe or a mutex gives). Nothing relies on how a
  processor orders plain stores and loads, and no fence is needed from Python.
- **Slots.** Two sets, used by turns: a rank starts call c+2 only after every rank has sent
  its byte of call c+1, which each does after it has read call c, so no slot is written
  while it is read. A tensor larger than a slot goes through in pieces, one call each.
- **The segment.** Rank 0 creates a file in /dev/shm and reserves its size (so a full
  /dev/shm fails here, not with SIGBUS later); every rank maps it and checks a token rank
  0 wrote into it (ranks on other hosts find no such file), and rank 0 unlinks it once all
  have mapped it, so nothing is left behind, even after a crash. The sockets live in
  Linux's abstract namespace, which leaves no file either.
- **Waiting.** A rank polls for up to ``spin_s``, yielding its core to any other runnable
  thread; past that it sleeps in ``select`` until a byte arrives, and gives up after
  ``timeout`` (gloo's default, 30 minutes). A rank that exits, however it exits, closes
  its sockets, and the ranks waiting for it read the end of the stream instead of a byte.
"""

from __future__ import annotations

import mmap
import os
import secrets
import select
import socket
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

SHM_DIR = Path("/dev/shm")
HEADER_BYTES = 64  # rank 0's token; the slots start on a cache line
MAX_SLOT_BYTES = 4 << 20  # per rank and turn
RANK_BYTES = 8  # a connecting rank first sends its rank, so the accepting one knows who it is


class SharedMemoryAllReduce:
    """Sums CPU tensors over the ranks of a process group through one shared memory segment.

    Build it with ``connect`` on every rank at the same point. ``all_reduce_`` sums a
    contiguous tensor in place (times a scale, which averages it); a rank whose awaited rank has exited raises
    ``ConnectionError``, and one that waits longer than ``timeout`` ``TimeoutError``.
    """

    def __init__(self, segment: mmap.mmap, peers: dict[int, socket.socket], rank: int, world_size: int,
                 slot_bytes: int, timeout: timedelta, spin_s: float):
        self.rank, self.world_size, self.slot_bytes = rank, world_size, slot_bytes
        self.timeout_s, self.spin_s = timeout.total_seconds(), spin_s
        self._segment, self._peers = segment, peers
        self._slots = torch.frombuffer(segment, dtype=torch.uint8, offset=HEADER_BYTES,
                                       count=2 * world_size * slot_bytes).view(2, world_size, slot_bytes)
        self._typed_slots: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}  # per dtype: both turns
        self._calls = 0

    @classmethod
    def connect(cls, slot_bytes: int, group: dist.ProcessGroup | None = None,
                timeout: timedelta = timedelta(minutes=30), spin_s: float = 0.002) -> SharedMemoryAllReduce | None:
        """Map one segment and connect every pair of ranks of ``group``, or return None on every rank where
        they cannot.

        ``slot_bytes`` is the most one call sends whole (at most 4 MiB): the gradients' size
        puts the default mlp's in one call. The ranks cannot share a segment across hosts,
        off Linux, or where /dev/shm lacks the room (``2 x world size x slot_bytes``). A
        collective: every rank calls it at the same point and all get the same answer.
        """
        rank, world_size = dist.get_rank(group), dist.get_world_size(group)
        slot_bytes = max(16, min(slot_bytes, MAX_SLOT_BYTES)) // 16 * 16  # whole elements of any dtype
        size = HEADER_BYTES + 2 * world_size * slot_bytes
        offer = [create_segment_file(size) if rank == 0 else None]  # rank 0's file and token, or None
        dist.broadcast_object_list(offer, group=group, group_src=0)
        segment = map_segment(*offer[0], size) if offer[0] else None
        listener = listen(offer[0][0], rank, world_size) if segment is not None else None
        peers: dict[int, socket.socket] = {}
        connected = False
        try:
            if not agree(segment is not None and listener is not None, group):
                return None
            if rank == 0:
                os.unlink(offer[0][0])  # every rank has mapped it: the mappings outlive the name
            # Every rank connects to the ranks below it; the connections wait in the listeners' backlogs.
            if not agree(connect_below(offer[0][0], rank, peers), group):
                return None
            accept_above(listener, rank, world_size, peers, timeout)
            connected = True
        finally:
            if listener is not None:
                listener.close()
            if not connected:  # nothing stays open, and no file stays behind
                for connection in peers.values():
                    connection.close()
                if segment is not None:
                    segment.close()
                if rank == 0 and offer[0] and Path(offer[0][0]).exists():
                    os.unlink(offer[0][0])
        for connection in peers.values():
            connection.setblocking(False)
        return cls(segment, dict(sorted(peers.items())), rank, world_size, slot_bytes, timeout, spin_s)

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
            self._publish()
            self._wait_for_all()
            torch.add(slots[0], slots[1], out=piece)  # in rank order on every rank: the same bytes everywhere
            for slot in slots[2:]:
                piece.add_(slot)
        return tensor

    def close(self) -> None:
        self._slots = self._typed_slots = None  # views into the segment must go before it
        self._segment.close()
        for connection in self._peers.values():
            connection.close()

    def _publish(self) -> None:
        """Tell every other rank that this rank's slot of this call is written."""
        for peer, connection in self._peers.items():
            try:
                connection.send(b"\1")
            except ConnectionError:
                raise self._lost(peer) from None

    def _wait_for_all(self) -> None:
        """Return once every other rank has sent its byte of this call."""
        waiting = dict(self._peers)
        started = time.perf_counter()
        while True:
            waiting = {peer: connection for peer, connection in waiting.items() if not self._heard(peer, connection)}
            if not waiting:
                return
            waited = time.perf_counter() - started
            if waited < self.spin_s:
                os.sched_yield()
            elif waited < self.timeout_s:
                select.select(list(waiting.values()), [], [], self.timeout_s - waited)
            else:
                raise TimeoutError(f"shared-memory all-reduce: rank {self.rank} waited {self.timeout_s:.0f} s "
                                   f"for ranks {list(waiting)}")

    def _heard(self, peer: int, connection: socket.socket) -> bool:
        """Whether ``peer``'s next byte has arrived (and take it)."""
        try:
            byte = connection.recv(1)
        except BlockingIOError:
            return False
        except ConnectionError:
            raise self._lost(peer) from None
        if not byte:
            raise self._lost(peer)
        return True

    def _lost(self, peer: int) -> ConnectionError:
        return ConnectionError(f"shared-memory all-reduce: rank {peer} exited while rank {self.rank} waited for it")


def agree(ready: bool, group: dist.ProcessGroup | None) -> bool:
    """Whether every rank of ``group`` is ``ready`` (a collective)."""
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, ready, group=group)
    return all(everyone)


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


def map_segment(path: str, token: int, size: int) -> mmap.mmap | None:
    """``path`` mapped, if it is rank 0's segment (``token`` at its start)."""
    try:
        descriptor = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        segment = mmap.mmap(descriptor, size)  # the mapping keeps the file, not the descriptor
    except (OSError, ValueError):  # no memory left to map, or a shorter file of the same name
        return None
    finally:
        os.close(descriptor)
    if int.from_bytes(segment[:8], "little") != token:
        segment.close()
        return None
    return segment


def socket_address(segment_path: str, rank: int) -> str:
    """Where ``rank`` listens: a name in Linux's abstract namespace (the leading NUL), unique to the segment."""
    return f"\0{Path(segment_path).name}-{rank}"


def listen(segment_path: str, rank: int, world_size: int) -> socket.socket | None:
    """This rank's listening Unix socket, or None where there can be none (no abstract namespace off Linux)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(socket_address(segment_path, rank))
        listener.listen(world_size)
    except OSError:
        listener.close()
        return None
    return listener


def connect_below(segment_path: str, rank: int, peers: dict[int, socket.socket]) -> bool:
    """Connect to every lower rank, saying which rank this is, into ``peers``; whether all connected."""
    for peer in range(rank):
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(socket_address(segment_path, peer))
            connection.sendall(rank.to_bytes(RANK_BYTES, "little"))
        except OSError:  # another network namespace: the ranks share /dev/shm but not the sockets
            connection.close()
            return False
        peers[peer] = connection
    return True


def accept_above(listener: socket.socket, rank: int, world_size: int, peers: dict[int, socket.socket],
                 timeout: timedelta) -> None:
    """Accept every higher rank's connection (already waiting in the backlog) into ``peers``."""
    listener.settimeout(timeout.total_seconds())
    for _ in range(rank + 1, world_size):
        connection, _ = listener.accept()
        connection.settimeout(timeout.total_seconds())
        peer = int.from_bytes(connection.recv(RANK_BYTES, socket.MSG_WAITALL), "little")
        peers[peer] = connection
