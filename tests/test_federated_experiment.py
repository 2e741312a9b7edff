"""experiments/fleet_vs_single.py runs end to end at a tiny size and writes its figures and table (not asserted)."""

import json

from experiments import fleet_vs_single
from sim.fleet import SITES


def test_fleet_vs_single_trains_four_ways_evaluates_and_writes_its_table(pick_place_fleet, tmp_path):
    docs = tmp_path / "federated.md"
    docs.write_text("# Federated\n\nintro\n\n<!-- fleet_vs_single:start -->\nold table\n<!-- fleet_vs_single:end -->\n"
                    "\nafter\n")
    result = fleet_vs_single.main([
        "--data", str(pick_place_fleet), "--out", str(tmp_path / "out"), "--steps", "10", "--batch-size", "32",
        "--rounds", "1", "--personal-after", "0", "--local-batch-size", "16", "--hidden", "16", "16",
        "--eval-episodes", "1",
        "--workers", "2", "--docs", str(docs), "--results-dir", str(tmp_path)])
    results = result["results"]
    for method in fleet_vs_single.METHODS:
        success = results[method]["success"]
        assert 0 <= success["fleet"] <= 100 and set(success["per_site"]) == set(SITES)
    traffic = {method: results[method]["communication"]["model_bytes"] for method in fleet_vs_single.METHODS}
    assert traffic["single"] == 0 and traffic["central"] > traffic["fedavg"] > 0 and traffic["personal"] > 0
    assert results["central"]["communication"]["data_bytes"] > 0 == results["fedavg"]["communication"]["data_bytes"]
    assert len(results["goals"]) == 4
    assert json.loads((tmp_path / "fleet_vs_single.json").read_text())["results"]["goals"] == results["goals"]

    text = docs.read_text()
    assert "old table" not in text and text.count("| personal |") == 1
    assert text.startswith("# Federated\n\nintro\n") and text.endswith("<!-- fleet_vs_single:end -->\n\nafter\n")
    assert "python -m experiments.fleet_vs_single --data" in text
