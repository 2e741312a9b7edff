"""experiments/fleet_learning_republish.py: a recorded run published again from its results file alone gives its
page back unchanged while behaviour cloning's curve is unchanged, and keeps what the run measured."""

import json
import shutil

import pytest

from core.errors import Failure
from core.files import REPO
from experiments.fleet_learning_republish import republish

RUN = "fleet_learning_push_5x10_10_step_hand_overs_fresh_encoders_pretrained_1500_steps_2_modes_ee_dz_4_action_steps"


def test_a_run_published_again_gives_its_table_and_measurements_back(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(REPO / "experiments/results" / f"{RUN}.json", results)
    recorded = json.loads((results / f"{RUN}.json").read_text())
    again = republish(RUN, results, docs=str(tmp_path / "runs"), media=str(tmp_path / "media"))
    page = tmp_path / "runs" / f"{RUN}.md"  # created: its markers, the page rendered between them
    assert page.read_text() == (REPO / "experiments/runs" / f"{RUN}.md").read_text()  # the same page
    assert (tmp_path / "media" / f"{RUN}_push.png").stat().st_size > 0
    for key in ("machine", "command", "runs", "seconds", "expert", "rows"):
        assert again[key] == recorded[key], key
    assert again["expert_held_out"] == {"pc_success": 100.0}  # given back from a row's held-out ratio
    assert json.loads((results / f"{RUN}.json").read_text())["rows"] == recorded["rows"]


def test_a_name_with_no_results_is_refused(tmp_path, capsys):
    with pytest.raises(Failure):
        republish("no_such_run", tmp_path)
    assert capsys.readouterr().err.strip() == f"error: {tmp_path}/no_such_run.json is not a recorded fleet-learning run"
