"""experiments/full_run.py at a tiny size: collect, torchrun training and evaluate per task, the table in the doc."""

import json
import sys
from pathlib import Path

import pytest

from core.options import parse_config
from experiments import full_run
from experiments.common import merged_rows, write_section
from train.checkpoint import latest_checkpoint, open_checkpoint


@pytest.mark.slow
@pytest.mark.cluster
def test_the_full_run_writes_its_figures_and_the_table(tmp_path):
    docs = tmp_path / "evaluation.md"
    docs.write_text("# Evaluation\n\nText before the table stays.\n")
    arguments = ["--tasks", "reach", "--robots", "2", "--episodes", "3", "--steps", "5", "--hidden", "16",
                 "--batch-size", "8", "--val-fraction", "0", "--eval-robots", "2", "--eval-episodes", "1",
                 "--workers", "1", "--out", str(tmp_path / "run"), "--docs", str(docs), "--media", str(tmp_path / "media"),
                 "--results-dir", str(tmp_path)]
    result = full_run.main(arguments)
    (reach,) = result["results"]
    assert reach["task"] == "reach" and reach["policy"] == "mlp" and reach["steps"] == 5 and reach["goal"] == 0.95
    assert reach["expert"]["n_episodes"] == reach["policy_success"]["n_episodes"] == 2
    assert reach["expert"]["pc_success"] == 100.0
    assert reach["met"] == (reach["policy_over_expert"] >= 0.95)
    assert json.loads((tmp_path / "full_run.json").read_text())["results"] == result["results"]
    text = docs.read_text()
    assert text.startswith("# Evaluation\n\nText before the table stays.")
    assert "| reach | mlp | 2 x 3 | 5 |" in text and "python -m experiments.full_run --tasks reach" in text


@pytest.mark.slow
@pytest.mark.cluster
def test_the_visuomotor_setting_runs_a_camera_policy_and_resumes_without_redoing_work(tmp_path):
    docs = tmp_path / "evaluation.md"
    arguments = ["--setting", "visuomotor", "--tasks", "reach", "--policies", "cnn", "--robots", "2", "--episodes", "2",
                 "--steps", "4", "--action-modes", "2", "--image-size", "32", "--batch-size", "8", "--val-fraction", "0", "--eval-robots", "2",
                 "--eval-episodes", "1", "--workers", "1", "--videos", "0", "--out", str(tmp_path / "run"),
                 "--docs", str(docs), "--media", str(tmp_path / "media"), "--results-dir", str(tmp_path)]
    (cnn,) = full_run.main(arguments)["results"]
    assert cnn["policy"] == "cnn" and cnn["inputs"] == "proprio+cameras" and cnn["site_goal"] == 0.85
    assert cnn["action_modes"] == 2 and "| reach | cnn (2 modes) |" in docs.read_text()
    assert open_checkpoint(latest_checkpoint(tmp_path / "run" / "reach" / "cnn" / "run")).spec.action_modes == 2
    assert cnn["policy_success"]["n_episodes"] == cnn["expert"]["n_episodes"] == 2
    assert "## The recorded full run (visuomotor)" in docs.read_text()
    train_log = tmp_path / "run" / "reach" / "cnn.train.log"
    trained = train_log.stat().st_mtime_ns
    (resumed,) = full_run.main(arguments)["results"]  # nothing trained or evaluated again (collect checks, quickly)
    assert train_log.stat().st_mtime_ns == trained
    assert {**resumed, "seconds": None, "measured": None} == {**cnn, "seconds": None, "measured": None}
    assert (resumed["seconds"]["train"], resumed["seconds"]["evaluate"]) == (cnn["seconds"]["train"],
                                                                             cnn["seconds"]["evaluate"])


def test_a_new_table_replaces_the_old_one_and_nothing_else(tmp_path):
    docs = tmp_path / "evaluation.md"
    docs.write_text("# Evaluation\n\nBefore.\n")
    write_section(docs, "full_run", "## Measured", "first table")
    docs.write_text(docs.read_text() + "\nAfter.\n")
    write_section(docs, "full_run", "## Measured", "second table")
    assert docs.read_text() == ("# Evaluation\n\nBefore.\n\n## Measured\n\n<!-- full_run:start -->\nsecond table\n"
                                "<!-- full_run:end -->\n\nAfter.\n")


def test_a_rerun_of_one_policy_on_the_same_data_replaces_its_recorded_row_and_keeps_the_others(tmp_path):
    def row(task: str, policy: str, success: float, command: str) -> dict:
        figure = {"n_episodes": 10, "pc_success": success, "ci95": [0.0, 100.0]}
        return {"task": task, "policy": policy, "training_robots": 2, "training_episodes": 3, "steps": 5,
                "policy_success": figure, "expert": {**figure, "pc_success": 100.0},
                "policy_per_site": {"office": figure}, "expert_per_site": {"office": 100.0},
                "policy_over_expert": success / 100, "goal": 0.95, "met": success >= 95,
                "seconds": {"collect": 1, "train": 2, "evaluate": 3},
                "measured": {"date": "today", "cores": 2, "device": "cpu", "code_version": "v", "command": command}}

    first, second = "python -m experiments.full_run --policies cnn", "python -m experiments.full_run --policies act"
    config = parse_config(full_run.FullRunConfig, "", ["--setting", "visuomotor", "--results-dir", str(tmp_path),
                                                        "--docs", str(tmp_path / "evaluation.md")])
    full_run.publish(config, [row("push", "cnn", 90.0, first), row("pick_place", "cnn", 94.0, first)])
    mixture = {**row("pick_place", "cnn", 96.0, second), "action_modes": 2}
    over_yaw = {**mixture, "mode_actions": ["ee_dyaw"]}
    less_data = {**row("pick_place", "cnn", 80.0, second), "training_episodes": 1}
    recorded = full_run.publish(config, [row("pick_place", "act", 50.0, second), row("push", "cnn", 96.0, second),
                                         mixture, over_yaw, less_data])  # beside the regressing one's on 2 x 3
    assert [(r["task"], r["policy"], r["policy_success"]["pc_success"], r["measured"]["command"])
            for r in recorded["results"]] == [("push", "cnn", 96.0, second), ("pick_place", "cnn", 94.0, first),
                                              ("pick_place", "act", 50.0, second), ("pick_place", "cnn", 96.0, second),
                                              ("pick_place", "cnn", 96.0, second), ("pick_place", "cnn", 80.0, second)]
    assert json.loads((tmp_path / "full_run_visuomotor.json").read_text())["results"] == recorded["results"]
    text = (tmp_path / "evaluation.md").read_text()
    assert f"code v: pick_place cnn\n{first}\n" in text
    assert f"code v: push cnn, pick_place act, pick_place cnn, pick_place cnn, pick_place cnn\n{second}\n" in text
    assert "| pick_place | cnn | 2 x 1 | 5 | 80.0%" in text
    assert "| pick_place | cnn (2 modes) | 2 x 3 | 5 | 96.0%" in text
    assert "| pick_place | cnn (2 modes over ee_dyaw) | 2 x 3 | 5 | 96.0%" in text
    assert "| pick_place | cnn | 2 x 3 | 5 | 94.0% [0, 100] |" in text and "| push | cnn | 2 x 3 | 5 | 96.0%" in text
    video = tmp_path / "robot_0000_office_policy_episode_000.mp4"
    video.write_bytes(b"mp4")
    cnn, act = ({**row("pick_place", policy, success, first), "videos": [str(video)]}
                for policy, success in (("cnn", 94.0), ("act", 50.0)))
    config.media = str(tmp_path / "media")
    full_run.copy_videos(config, "pick_place", [act], [cnn, act])  # the recorded cnn is the best: its run copied it
    assert not (tmp_path / "media").exists()
    full_run.copy_videos(config, "pick_place", [cnn, act], [cnn, act])
    assert [p.name for p in (tmp_path / "media").iterdir()] == ["full_run_visuomotor_pick_place_cnn_office.mp4"]
    old_file = {"machine": {"date": "then", "cores": 2, "device": "cpu", "code_version": "old"}, "command": first,
                "results": [{k: v for k, v in row("push", "mlp", 80.0, first).items() if k != "measured"}]}
    (old,) = merged_rows(old_file, [], lambda row: row["task"], "results")  # recorded before rows had a command
    assert old["measured"] == {**old_file["machine"], "command": first}


def test_a_stage_clock_adds_the_runs_that_resume_a_stage_and_restarts_with_a_fresh_one(tmp_path):
    def sleep(seconds: float) -> list[str]:
        return [sys.executable, "-c", f"import time; time.sleep({seconds})"]

    clock = full_run.StageClock(tmp_path / "seconds.json")
    clock.run("train", "train", sleep(2.0), tmp_path / "log", resumes=False)
    clock.run("train", "train", sleep(0.1), tmp_path / "log", resumes=True)  # a resumed run adds its seconds
    assert clock.seconds["train"] >= 2.1
    clock.run("train", "train", sleep(0.1), tmp_path / "log", resumes=False)  # started afresh: the earlier runs go
    assert 0.1 <= clock.seconds["train"] < 2.0
    assert json.loads((tmp_path / "seconds.json").read_text()) == clock.seconds


def test_policy_steps_and_lr_replace_a_tasks_for_that_policy_only_and_keep_the_settings_others(capsys):
    visuomotor = full_run.SETTINGS["visuomotor"]
    default_steps = full_run.parse_per_policy("policy_steps", visuomotor["policy_steps"])
    default_lr = full_run.parse_per_policy("policy_lr", visuomotor["policy_lr"])
    config = parse_config(full_run.FullRunConfig, "", ["--setting", "visuomotor", "--policy-steps", "act=300",
                                                        "--policy-lr", "act=0.0005"])
    pick_place = config.tasks.index("pick_place")
    assert config.training("act", pick_place) == (300, 0.0, 0.0005)
    assert config.training("cnn", pick_place) == (8000, 0.999, None)
    assert config.training("diffusion", pick_place) == (default_steps["diffusion"], 0.0, default_lr["diffusion"])
    assert config.policy_steps == ("act=300", f"diffusion={default_steps['diffusion']}")  # saved with the results
    command = full_run.train_command(config, "act", pick_place, Path("out"))
    assert command[command.index("--max-steps") + 1] == "300" and command[command.index("--ema-decay") + 1] == "0.0"
    assert command[command.index("--lr") + 1] == "0.0005"
    assert "--lr" not in full_run.train_command(config, "cnn", pick_place, Path("out"))
    for option, entry in (("policy-steps", "atc=300"), ("policy-steps", "act=0"), ("policy-steps", "act"),
                          ("policy-steps", "act=1.5"), ("policy-lr", "act=fast"), ("policy-lr", "act=-1")):
        with pytest.raises(SystemExit):
            parse_config(full_run.FullRunConfig, "", ["--setting", "visuomotor", f"--{option}", entry])
        assert f"error: --{option} takes POLICY=" in capsys.readouterr().err
