"""collect: run the fleet's scripted experts in parallel on dask, one zarr shard per robot.

``collect.engine.run_collection`` runs a collection; ``collect.shard`` is the store format.
The engine is not imported here: dataset/ and train/ import the store format, and loading
dask's distributed with it would add ~0.4 s to every training rank's start.
"""

from collect.config import CollectConfig

__all__ = ["CollectConfig"]
