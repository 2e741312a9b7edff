"""benchmarks/train_speed.py runs every setup and writes its JSON and table row (figures are not asserted)."""

import json

from benchmarks import train_speed


def test_train_speed_measures_one_and_two_ranks(pick_place_fleet, tmp_path):
    tables = tmp_path / "README.md"
    result = train_speed.main(["--data", str(pick_place_fleet), "--steps", "4", "--log-interval", "2", "--rounds", "1",
                               "--results-dir", str(tmp_path), "--tables", str(tables),
                               "--", "--batch-size", "32", "--hidden", "32", "32"])
    scaling = result["mlp_scaling"]
    assert set(scaling["best"]) == {"1r1t", "1r2t", "2r1t", "2p1t"}
    assert all(figures["samples_per_s"] > 0 for figures in scaling["best"].values())
    assert scaling["best"]["1r1t"]["sync_efficiency"] == 1.0
    assert 0 < scaling["best"]["2r1t"]["sync_efficiency"] < 1
    assert scaling["ratios"]["weak_scaling_efficiency"] > 0
    assert json.loads((tmp_path / "train_speed.json").read_text())["mlp_scaling"]["ratios"] == scaling["ratios"]
    assert "| cpu (gloo) | fleet | --batch-size 32 --hidden 32 32 | 4 |" in tables.read_text()
