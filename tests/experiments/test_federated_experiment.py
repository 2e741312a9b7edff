"""The federated experiments run end to end at a tiny size and write their figures and tables."""

import json

import pytest
import torch

from collect_helpers import collected
from dataset import FleetStore
from experiments import fleet_vs_single, personal_ceiling
from federated_helpers import configure
from sim.fleet import SITES
from train.checkpoint import load_policy, open_checkpoint
from train.federated import run_federated

pytestmark = pytest.mark.slow


@pytest.mark.cluster
def test_fleet_vs_single_trains_four_ways_evaluates_and_writes_its_table(pick_place_fleet, tmp_path):
    docs = tmp_path / "federated.md"
    docs.write_text("# Federated\n\nintro\n\n<!-- fleet_vs_single:start -->\nold table\n<!-- fleet_vs_single:end -->\n"
                    "\nafter\n")
    result = fleet_vs_single.main([
        "--data", str(pick_place_fleet), "--out", str(tmp_path / "out"), "--steps", "10", "--batch-size", "32",
        "--rounds", "1", "--personal-after", "0", "--head-epochs", "1", "--local-batch-size", "16",
        "--hidden", "16", "16", "--eval-episodes", "1",
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


def test_personal_ceiling_gives_each_group_its_fine_tuned_weights_and_writes_its_table(tmp_path_factory, tmp_path):
    fleet = collected(tmp_path_factory, "two_per_site", "--robots", "6", "--episodes", "3", "--task", "pick_place",
                      "--workers", "2")
    run = tmp_path / "fedavg"
    run_federated(configure(fleet, run, "--rounds", "1"))
    docs = tmp_path / "federated.md"
    results = personal_ceiling.main(["--run", str(run), "--out", str(tmp_path / "out"), "--epochs", "1",
                                     "--eval-episodes", "1", "--docs", str(docs), "--results-dir", str(tmp_path)])
    assert list(results) == ["as trained", *personal_ceiling.VARIANTS]
    assert all(set(result["per_site"]) == set(SITES) for result in results.values())

    trained = open_checkpoint(run)
    store = FleetStore.open(fleet)
    policy, _ = load_policy(run)
    for variant, (group, part) in personal_ceiling.VARIANTS.items():
        copy = open_checkpoint(tmp_path / "out" / variant.replace(" ", "_"))
        assert all(torch.equal(copy.weights[k], trained.weights[k]) for k in trained.weights)  # shared: untouched
        personal = copy.personal
        assert sorted(personal) == store.robots
        keys = set(policy.head_keys()) if part == "head" else {name for name, _ in policy.named_parameters()}
        assert all(set(weights) == keys for weights in personal.values())
        first, second = [robot for robot in store.robots if store.site_of(robot) == store.site_of(store.robots[0])][:2]
        same = all(torch.equal(personal[first][k], personal[second][k]) for k in keys)
        assert same == (group == "site")  # a site's robots share one fine-tuned copy; robots each their own
        assert not all(torch.equal(personal[first][k], trained.weights[k]) for k in keys)  # it did train
    assert json.loads((tmp_path / "personal_ceiling.json").read_text())["results"] == results
    assert "| site policy |" in docs.read_text()
