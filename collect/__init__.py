"""collect: run the fleet's scripted experts in parallel on dask, one zarr shard per robot."""

from collect.config import CollectConfig
from collect.engine import CollectionSummary, run_collection

__all__ = ["CollectConfig", "CollectionSummary", "run_collection"]
