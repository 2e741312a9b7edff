"""benchmarks/act_vs_lerobot.py runs both trainers and reports their steps per second (figures not asserted)."""

import pytest

from benchmarks.act_vs_lerobot import act_vs_lerobot

pytestmark = pytest.mark.slow


def test_act_vs_lerobot_times_both_trainers(pick_place_fleet, tmp_path):
    figures = act_vs_lerobot(pick_place_fleet, tmp_path, steps=20, batch_size=8, lerobot_workers=0, rounds=1)
    assert figures["steps_per_s_best"]["ours"] > 0 and figures["steps_per_s_best"]["lerobot"] > 0
    assert figures["ours_vs_lerobot"] > 0 and figures["act_config"]["chunk_size"] == 16
