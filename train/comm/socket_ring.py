"""A ring all-reduce over direct TCP sockets, run on the thread that needs the result.

This is the transport of the ``ring`` comm hook (``train/comm/comm_hooks.py``), for CPU ranks
on several hosts; between ranks on one host ``auto`` picks the shared-memory all-reduce
(``train/comm/shm_all_reduce.py``), and falls back to this ring where they cannot share memory.

Why not gloo's all-reduce there: gloo hands each call from the training thread to one of
its worker threads, and each message that arrives from its I/O thread to that worker and
back. Every hand-off wakes a thread, and on a small VM a woken thread can wait for the
next scheduler tick before it runs, so an all-reduce takes many times what the loopback
needs to carry its bytes (docs/performance.md). Here the training thread sends and
receives the bytes itself, so the only wake-up left is that of a rank waiting for its
neighbour's bytes to arrive.

The ring: rank r sends to rank r+1 and receives from rank r-1 (modulo the world size).
The tensor is cut into one chunk per rank. In N-1 steps each rank adds the chunk it
receives into its own copy (reduce-scatter), after which rank r holds the full sum of
chunk r+1; in N-1 more steps the summed chunks travel round (all-gather). Each chunk is
summed on one rank only, so every rank ends with the same bytes. A step sends and
receives at once on non-blocking sockets, so no rank can block on a send while its
neighbour blocks on one too.
"""

from __future__ import annotations

import os
import select
import socket
from datetime import timedelta

import torch
import torch.distributed as dist


def reachable_address() -> str:
    """This host's address on the route to the rendezvous host (``MASTER_ADDR``): where other ranks can reach it."""
    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500"))
    family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, kind) as probe:
        probe.connect(address)  # a UDP connect sends nothing: it only picks the route
        return probe.getsockname()[0]


class SocketRing:
    """This rank's connections to its two neighbours in a ring of the group's ranks.

    Every rank of ``group`` must construct it at the same point (it all-gathers the
    listening addresses through the process group). ``all_reduce_`` then sums a CPU
    tensor over the ranks; a neighbour that exits, or sends nothing for ``timeout``
    (gloo's default, 30 minutes), raises ``ConnectionError`` or ``TimeoutError``
    instead of hanging.
    """

    def __init__(self, group: dist.ProcessGroup | None = None, timeout: timedelta = timedelta(minutes=30)):
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        self.timeout_s = timeout.total_seconds()
        address = reachable_address()
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.create_server((address, 0), family=family) as listener:
            addresses: list[tuple | None] = [None] * self.world_size
            dist.all_gather_object(addresses, listener.getsockname()[:2], group=group)
            # Connecting completes in the kernel's backlog before the neighbour accepts: no rank waits on another here.
            self.right = socket.create_connection(addresses[(self.rank + 1) % self.world_size], timeout=self.timeout_s)
            listener.settimeout(self.timeout_s)
            self.left, _ = listener.accept()
        self._poller = select.poll()
        for connection in (self.left, self.right):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.setblocking(False)
            self._poller.register(connection, 0)

    def close(self) -> None:
        self.left.close()
        self.right.close()

    def all_reduce_(self, tensor: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """Sum ``scale`` x the contiguous CPU ``tensor`` over the ranks, in place; returns it."""
        n, rank = self.world_size, self.rank
        if scale != 1.0:
            tensor.mul_(scale)
        chunks = tensor.view(-1).tensor_split(n)
        incoming = torch.empty_like(chunks[0])  # tensor_split makes the first chunk the largest
        for step in range(n - 1):  # reduce-scatter
            received = chunks[(rank - step - 1) % n]
            self._send_and_receive(chunks[(rank - step) % n], incoming[: received.numel()])
            received.add_(incoming[: received.numel()])
        for step in range(n - 1):  # all-gather
            self._send_and_receive(chunks[(rank + 1 - step) % n], chunks[(rank - step) % n])
        return tensor

    def _send_and_receive(self, outgoing: torch.Tensor, incoming: torch.Tensor) -> None:
        """Send ``outgoing`` to the right neighbour while filling ``incoming`` from the left one."""
        to_send = memoryview(outgoing.view(torch.uint8).numpy())
        to_fill = memoryview(incoming.view(torch.uint8).numpy())
        sent = filled = 0
        while sent < len(to_send) or filled < len(to_fill):
            self._poller.modify(self.right, select.POLLOUT if sent < len(to_send) else 0)
            self._poller.modify(self.left, select.POLLIN if filled < len(to_fill) else 0)
            events = self._poller.poll(self.timeout_s * 1000)
            if not events:
                raise TimeoutError(f"ring all-reduce: rank {self.rank} heard nothing from its neighbours "
                                   f"for {self.timeout_s:.0f} s")
            for fd, _ in events:  # an error or hang-up shows in the send or receive it makes fail
                try:
                    if fd == self.left.fileno() and filled < len(to_fill):
                        count = self.left.recv_into(to_fill[filled:])
                        if count == 0:
                            raise ConnectionError(f"ring all-reduce: rank {(self.rank - 1) % self.world_size} "
                                                  f"closed its connection to rank {self.rank}")
                        filled += count
                    elif fd == self.right.fileno() and sent < len(to_send):
                        sent += self.right.send(to_send[sent:])
                except BlockingIOError:  # readiness can be spurious: poll again
                    pass

