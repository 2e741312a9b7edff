"""benchmarks/train_speed.py runs every setup and writes its JSON and table row (figures are not asserted)."""

import json

from benchmarks import train_speed
from benchmarks.common import realtime_permitted


def test_train_speed_measures_one_and_two_ranks(pick_place_fleet, tmp_path):
    tables = tmp_path / "README.md"
    result = train_speed.main(["--data", str(pick_place_fleet), "--steps", "4", "--log-interval", "2", "--rounds", "1",
                               "--results-dir", str(tmp_path), "--tables", str(tables),
                               "--", "--batch-size", "32", "--hidden", "32", "32"])
    scaling = result["mlp_scaling"]
    # Side by side under the real-time scheduler wherever this user may use it.
    realtime = {"1r1t_fifo", "2r1t_fifo", "2p1t_fifo"} if realtime_permitted() else set()
    assert set(scaling["best"]) == {"1r1t", "1r2t", "2r1t", "2p1t"} | realtime
    assert all(setup["realtime"] == name.endswith("_fifo") for name, setup in scaling["setups"].items())
    assert all(figures["samples_per_s"] > 0 for figures in scaling["best"].values())
    assert scaling["best"]["1r1t"]["sync_efficiency"] == 1.0
    assert 0 < scaling["best"]["2r1t"]["sync_efficiency"] < 1
    assert scaling["ratios"]["weak_scaling_efficiency"] > 0
    assert ("weak_scaling_efficiency_fifo" in scaling["ratios"]) == bool(realtime)
    assert json.loads((tmp_path / "train_speed.json").read_text())["mlp_scaling"]["ratios"] == scaling["ratios"]
    assert "| cpu (gloo) | fleet | --batch-size 32 --hidden 32 32 | 4 |" in tables.read_text()


def test_the_image_case_trains_the_cnn_on_cameras_and_reports_its_data_wait(camera_fleet, tmp_path):
    result = train_speed.main(["--case", "image", "--data", str(camera_fleet), "--steps", "4", "--log-interval", "2",
                               "--rounds", "1", "--no-realtime", "--results-dir", str(tmp_path),
                               "--tables", str(tmp_path / "README.md"), "--", "--batch-size", "8"])
    scaling = result["image_scaling"]
    assert set(scaling["best"]) == {"1r1t", "1r2t", "2r1t", "2p1t"}
    assert 0 <= scaling["data_wait_share"] < 1 and scaling["ratios"]["weak_scaling_efficiency"] > 0
    assert json.loads((tmp_path / "train_speed_image.json").read_text())["image_scaling"] == scaling
    table = (tmp_path / "README.md").read_text()
    assert "--policy cnn --inputs proprio+cameras --batch-size 32 --batch-size 8" in table
