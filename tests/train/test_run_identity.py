"""A run knows what it was trained on: resuming on other data or options is refused in one line, or applied
and said, before anything is written; an error that a torchrun restart cannot fix ends the job after one attempt.

The resumes run bc.py's main in this process (``train_here``): ``check_resume`` needs no process boundary."""

import json
import shutil
import subprocess

import pytest

from train.checkpoint import TRAINING_STATE, checkpoint_dir, latest_checkpoint, open_checkpoint
from train.config import flat_options
from train.restarts import RECORD
from collect_helpers import REPO
from fault_helpers import assert_one_line, file_tree, truncate
from fleet_helpers import fleet_learn
from train_helpers import metrics, train_command, train_env, train_here


def refusal(completed) -> str:
    assert completed.returncode == 2, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert completed.stderr.strip().count("\n") == 0 and "Traceback" not in completed.stderr, completed.stderr
    return completed.stderr


@pytest.mark.slow
def test_the_checkpoint_records_the_data_it_was_trained_on(trained_run):
    identity = open_checkpoint(trained_run).identity
    assert identity["task"] == "pick_place" and identity["episodes"] == {"0": 3, "1": 3, "2": 3}
    assert sorted(identity["sites"]) == ["factory", "office", "warehouse"] and identity["seed"] == 0
    assert len(identity["episode_seeds"]) == 16


@pytest.mark.slow
def test_resuming_on_another_task_is_refused(run_copy, camera_fleet):
    stderr = refusal(train_here("--data", camera_fleet, "--out", run_copy, "--max-steps", "30"))
    assert f"cannot resume {run_copy}: it was trained on task pick_place, not reach" in stderr
    assert open_checkpoint(run_copy).step == 20  # nothing was written


OTHER_ROBOTS = ["--robots", "0", "1", "--max-steps", "30"]  # 2 of the 3 robots trained_run was trained on


@pytest.mark.slow
def test_other_data_of_the_same_task_is_refused(run_copy, pick_place_fleet):
    stderr = refusal(train_here("--data", pick_place_fleet, "--out", run_copy, *OTHER_ROBOTS))
    assert "it was trained on other data (sites ['factory', 'office', 'warehouse'] -> " in stderr
    assert "episodes: 9 episodes of 3 robots -> 6 episodes of 2 robots" in stderr and "--allow-new-data" in stderr
    assert open_checkpoint(run_copy).step == 20  # nothing was written


@pytest.mark.slow
def test_other_data_of_the_same_task_is_allowed_and_said_and_keeps_the_normalisation(run_copy, pick_place_fleet):
    allowed = train_here("--data", pick_place_fleet, "--out", run_copy, *OTHER_ROBOTS, "--allow-new-data")
    assert allowed.returncode == 0 and "resumed from step 20" in allowed.stdout, allowed.stderr[-3000:]
    assert "warning: carrying on with new data (--allow-new-data): sites" in allowed.stderr
    resumed, before = open_checkpoint(run_copy), open_checkpoint(run_copy / "checkpoints" / "step_00000020")
    assert resumed.step == 30 and resumed.identity["episodes"] == {"0": 3, "1": 3}  # what it trains on now
    assert [collection["identity"]["episodes"] for collection in resumed.collections] == [
        {"0": 3, "1": 3, "2": 3}, {"0": 3, "1": 3}]  # and every collection it trained on, in order
    for name, values in before.stats.items():  # and still the normalisation its weights were trained with
        assert all((resumed.stats[name][key] == value).all() for key, value in values.items())


@pytest.mark.slow
def test_an_optimisation_option_changed_on_resume_is_refused(run_copy, pick_place_fleet):
    stderr = refusal(train_here("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "30", "--lr", "1e-2"))
    assert "it was trained with --lr 0.003, not 0.01: resume with the same --lr, or --no-resume" in stderr
    assert open_checkpoint(run_copy).step == 20  # nothing was written


@pytest.mark.slow
def test_max_steps_changed_on_resume_is_applied_and_said(run_copy, pick_place_fleet):
    extended = train_here("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "30")
    assert extended.returncode == 0 and extended.stderr == "", extended.stderr
    assert ("resumed from step 20 (--max-steps 30, was 20: the learning rate carries on from 0.0003 and decays to "
            "10% at the new end)") in extended.stdout
    rates = {record["step"]: record["lr"] for record in metrics(run_copy) if "lr" in record}
    assert all(rate == pytest.approx(rates[20]) for step, rate in rates.items() if step > 20)  # no jump back up
    assert open_checkpoint(run_copy).config["optim"]["max_steps"] == 30


@pytest.mark.slow
def test_a_run_saved_before_the_option_groups_resumes(run_copy, pick_place_fleet):
    description = run_copy / "checkpoints" / "step_00000020" / "checkpoint.json"
    saved = json.loads(description.read_text())
    saved["config"] = flat_options(saved["config"])  # as runs saved their config before the groups
    description.write_text(json.dumps(saved))
    stderr = refusal(train_here("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "30", "--lr", "1e-2"))
    assert "it was trained with --lr 0.003, not 0.01" in stderr
    extended = train_here("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "30")
    assert extended.returncode == 0 and "resumed from step 20 (--max-steps 30, was 20" in extended.stdout
    assert open_checkpoint(run_copy).config["optim"]["max_steps"] == 30


@pytest.mark.slow
@pytest.mark.cluster
def test_an_error_a_restart_cannot_fix_ends_the_torchrun_job_after_one_attempt(pick_place_fleet, tmp_path):
    run = tmp_path / "run"
    command = train_command("--data", pick_place_fleet, "--out", run, "--batch-size", "100000", ranks=2,
                            launcher_options=("--max-restarts=3",))
    completed = subprocess.run(command, capture_output=True, text=True, env=train_env(), cwd=REPO, timeout=600)
    assert completed.returncode != 0
    ours = [line for line in completed.stderr.splitlines() if line.startswith("error: ")]
    assert len(ours) == 2 and all("batch size 100000 is larger than" in line for line in ours), completed.stderr
    record = json.loads((run / RECORD).read_text())
    assert record["error"] == ours[0].removeprefix("error: ")

    fixed = train_here("--data", pick_place_fleet, "--out", run, "--max-steps", "10")  # other inputs: it runs
    assert fixed.returncode == 0, fixed.stderr[-3000:]


@pytest.mark.slow
def test_a_run_that_cannot_resume_is_refused_before_the_first_round_deploys(run_copy, pick_place_fleet):
    """Its only checkpoint's resume state damaged: one line, and the run directory as it was, byte for byte."""
    shutil.rmtree(checkpoint_dir(run_copy) / "step_00000010")
    truncate(latest_checkpoint(run_copy) / TRAINING_STATE)
    before = file_tree(run_copy)
    completed = fleet_learn(run_copy, pick_place_fleet)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert_one_line(completed.stderr, f"no intact checkpoint in {checkpoint_dir(run_copy)}", "--no-resume")
    assert file_tree(run_copy) == before
