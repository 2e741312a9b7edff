"""Gradient transport: how weights and gradients travel between ranks and clients.

``comm_hooks`` holds the ``--comm-hook`` choices of ``train/bc.py``; ``shm_all_reduce``
(ranks on one host, through shared memory) and ``socket_ring`` (a ring all-reduce over
direct TCP sockets) are the transports beneath its ``shm`` and ``ring`` hooks;
``compression`` is int8 quantisation and top-k sparsification with error feedback, used
by the ``int8`` hook and by federated deltas. Nothing is imported here: import the module
you need.
"""
