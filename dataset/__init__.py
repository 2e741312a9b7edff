"""dataset: read fleet stores, build training windows and loaders, interoperate with LeRobot."""

from dataset.fleet_store import FleetStore

__all__ = ["FleetStore"]
