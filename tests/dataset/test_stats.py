"""dataset statistics: equal to numpy's, cached beside the data, recomputed when the data changes."""

import json
import shutil

import numpy as np
import pytest

from collect_helpers import run_collect
from dataset import FleetStore
from dataset.stats import STATS_FILE, fleet_stats


def numpy_stats(store: FleetStore, name: str) -> dict[str, np.ndarray]:
    """The same statistics, from every committed frame loaded at once."""
    values = np.concatenate([store.episode(r, i)[name] for r in store.robots for i in range(store.num_episodes_of(r))])
    if store.features[name]["dtype"] == "image":  # per channel, [0, 1] scale, shape (C, 1, 1)
        values = np.moveaxis(values / 255.0, -1, 0).reshape(values.shape[-1], -1).T
    values = values.reshape(len(values), -1).astype(np.float64)
    stats = {"mean": values.mean(0), "std": values.std(0), "min": values.min(0), "max": values.max(0),
             "q01": np.quantile(values, 0.01, axis=0), "q99": np.quantile(values, 0.99, axis=0)}
    if store.features[name]["dtype"] == "image":
        stats = {key: value.reshape(-1, 1, 1) for key, value in stats.items()}
    return stats


@pytest.mark.parametrize("fleet", ["pick_place_fleet", "camera_fleet"])
def test_statistics_equal_numpys_for_every_feature(fleet, request, tmp_path):
    path = tmp_path / "fleet"
    shutil.copytree(request.getfixturevalue(fleet), path)
    store = FleetStore.open(path)
    stats = fleet_stats(store)
    assert stats.keys() == store.features.keys()
    for name in store.features:
        for key, expected in numpy_stats(store, name).items():
            assert stats[name][key].shape == expected.shape, (name, key)
            np.testing.assert_allclose(stats[name][key], expected, rtol=1e-5, atol=1e-6, err_msg=f"{name} {key}")


@pytest.mark.slow
def test_statistics_are_cached_and_recomputed_when_the_data_changes(tmp_path):
    out = tmp_path / "fleet"
    assert run_collect(out, "--task", "reach", "--robots", "2", "--episodes", "2").returncode == 0
    first = fleet_stats(FleetStore.open(out))
    cache = json.loads((out / STATS_FILE).read_text())
    cache["stats"]["action"]["mean"] = [42.0] * 5  # a marker only the cache can return
    (out / STATS_FILE).write_text(json.dumps(cache))
    assert fleet_stats(FleetStore.open(out))["action"]["mean"].tolist() == [42.0] * 5
    assert fleet_stats(FleetStore.open(out), recompute=True)["action"]["mean"].tolist() == \
        first["action"]["mean"].tolist()

    assert run_collect(out, "--task", "reach", "--robots", "2", "--episodes", "4").returncode == 0  # more data
    grown = FleetStore.open(out)
    fresh = fleet_stats(grown)
    np.testing.assert_allclose(fresh["action"]["mean"], numpy_stats(grown, "action")["mean"], rtol=1e-5, atol=1e-6)
    assert json.loads((out / STATS_FILE).read_text())["fingerprint"]["robot_0000.zarr"][0] == 4
