"""Federated learning's internals, behind the ``train/federated.py`` command.

``federated_config`` holds the command's options (``FederatedConfig``); ``fedavg`` is
what one client does in a round and how the server averages the results; ``rounds``
runs a round on dask: samples the clients, runs them against a deadline and sorts out
which ones completed, failed or came late. Nothing is imported here: import the module
you need.
"""
