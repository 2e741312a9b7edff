"""collect: run the fleet's scripted experts in parallel on dask, one zarr shard per robot.

``collect.engine.run_collection`` runs a collection, writing through dataset/'s store format
(``dataset.writer``, ``dataset.manifest``); ``collect.repair`` recollects damaged robots. The
engine is not imported here: train/ imports the config, and loading dask's distributed with
it would slow every training rank's start (docs/performance.md).
"""

from collect.config import CollectConfig

__all__ = ["CollectConfig"]
