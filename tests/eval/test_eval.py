"""evaluate: eval_info.json and its numbers, the expert baseline, held-out seeds, videos, bad checkpoints."""

import csv
import json
import shutil
import subprocess
import sys

import av
import gymnasium as gym
import numpy as np
import pytest
import torch

from collect_helpers import REPO, collected, git_status, subprocess_env
from fault_helpers import assert_one_line
import core.files
from dataset import FleetStore
from eval import EvalConfig, run_evaluation
from eval.cli import main as evaluate_main
from eval.engine import make_jobs
from eval.output import check_out
from eval.plan import held_out_seeds, make_plan, trained_seeds
from eval.report import wilson_interval
from eval.rollout import RobotJob, evaluate_robot
from sim.envs.reach import ReachEnv
from sim.experts import ReachExpert
from sim.fleet import SITES, episode_seed, make_robot
from sim.rollout import run_episode
from sim.tasks import TaskSpec, resolve_task
from train.checkpoint import latest_checkpoint, load_policy, open_checkpoint


def run_evaluate(*arguments) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval.cli", *map(str, arguments)], capture_output=True, text=True,
                          env=subprocess_env(), cwd=REPO, timeout=600)


@pytest.fixture(scope="module")
def reach_fleet(tmp_path_factory):
    """3 robots x 8 reach episodes: the training data of the checkpoint below."""
    return collected(tmp_path_factory, "eval_reach", "--robots", "3", "--episodes", "8", "--task", "reach",
                     "--workers", "2")


@pytest.fixture(scope="module")
def checkpoint(reach_fleet, tmp_path_factory):
    """A small MLP trained for 150 steps on the reach fleet (it reaches some goals, not all)."""
    run = tmp_path_factory.mktemp("eval_run") / "run"
    completed = subprocess.run(
        [sys.executable, str(REPO / "train" / "bc.py"), "--data", str(reach_fleet), "--out", str(run),
         "--max-steps", "150", "--batch-size", "64", "--hidden", "64", "64", "--lr", "3e-3", "--warmup-steps", "10",
         "--log-interval", "50", "--val-interval", "150", "--checkpoint-interval", "150"],
        capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def compared(checkpoint, tmp_path_factory):
    """`evaluate --compare --videos 3` on the 3 training robots x 4 episodes: (completed process, EVAL)."""
    out = tmp_path_factory.mktemp("eval_out") / "eval"
    completed = run_evaluate("--checkpoint", checkpoint, "--robots", 3, "--episodes", 4, "--out", out,
                             "--compare", "--videos", 3, "--workers", 2, "--batch", 3)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed, out


@pytest.mark.slow
def test_eval_info_holds_every_episode_and_consistent_figures(compared):
    completed, out = compared
    info = json.loads((out / "eval_info.json").read_text())
    assert {"per_episode", "per_robot", "per_site", "per_task", "fleet", "aggregated", "config", "checkpoint",
            "setup", "expert", "compare", "video_paths", "code_version"} <= set(info)
    assert info["agent"] == "policy" and info["task"] == "reach" and info["checkpoint"]["step"] == 150
    episodes = info["per_episode"]
    assert [(e["robot_id"], e["episode"]) for e in episodes] == [(r, i) for r in range(3) for i in range(4)]
    for episode in episodes:
        assert set(episode) >= {"robot_id", "site", "task", "seed", "success", "steps", "sum_reward", "error"}
        assert episode["site"] == make_robot(episode["robot_id"]).site and episode["error"] is None
        assert 1 <= episode["steps"] <= 60 and episode["sum_reward"] < 0  # reward: minus the distance

    # per robot, per site, per task and fleet are the same episodes counted at different levels
    for row in info["per_robot"]:
        mine = [e for e in episodes if e["robot_id"] == row["robot_id"]]
        assert row["n_episodes"] == 4 and row["n_success"] == sum(e["success"] for e in mine)
        assert row["pc_success"] == pytest.approx(100 * row["n_success"] / 4)
    fleet = info["fleet"]
    assert fleet["n_episodes"] == 12 == sum(row["n_episodes"] for row in info["per_robot"])
    assert fleet["n_success"] == sum(row["n_success"] for row in info["per_robot"])
    assert fleet["n_success"] == sum(site["n_success"] for site in info["per_site"].values())
    assert fleet["pc_success"] == pytest.approx(100 * fleet["n_success"] / 12) == info["aggregated"]["pc_success"]
    assert fleet["ci95"] == wilson_interval(fleet["n_success"], 12)
    assert fleet["ci95"][0] <= fleet["pc_success"] <= fleet["ci95"][1]
    assert list(info["per_site"]) == list(SITES) and info["per_task"]["reach"] == {k: fleet[k] for k in info["per_task"]["reach"]}

    rows = list(csv.DictReader((out / "per_robot.csv").open()))
    assert [int(r["robot_id"]) for r in rows] == [0, 1, 2]
    assert [int(r["n_success"]) for r in rows] == [row["n_success"] for row in info["per_robot"]]
    assert (out / "success.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for site in (*SITES, "fleet"):  # the console table
        assert any(line.startswith(site) for line in completed.stdout.splitlines()), completed.stdout
    assert completed.stdout.startswith("dask dashboard: http://127.0.0.1:")  # then the table


@pytest.mark.slow
def test_the_console_names_the_inputs_the_policy_reads_on_its_first_line(compared, checkpoint):
    completed, _ = compared
    spec = open_checkpoint(checkpoint).spec
    lines = completed.stdout.splitlines()  # the run's lines (the dask dashboard's address), then the summary
    first = next(index for index, line in enumerate(lines) if line.startswith("policy on reach: 3 robots x 4 episodes"))
    assert f"; reads {spec.inputs} ({', '.join(spec.features)}); seeds:" in lines[first] and spec.inputs == "state"
    assert lines[first + 1].split() == ["robot", "site", "policy", "expert"]  # then the per-robot comparison


@pytest.mark.slow
def test_compare_puts_the_expert_on_the_same_robots_and_seeds(compared):
    info = json.loads((compared[1] / "eval_info.json").read_text())
    expert = info["expert"]
    assert [(e["robot_id"], e["seed"]) for e in expert["per_episode"]] == \
        [(e["robot_id"], e["seed"]) for e in info["per_episode"]]
    assert expert["fleet"]["pc_success"] == 100.0  # the scripted reach expert never fails on these seeds
    fleet = info["compare"]["fleet"]
    assert fleet["policy_over_expert"] == pytest.approx(info["fleet"]["pc_success"] / 100.0)
    assert [row["expert_pc_success"] for row in info["compare"]["per_robot"]] == [100.0] * 3


@pytest.mark.slow
def test_videos_are_decodable_and_cover_every_site(compared):
    out = compared[1]
    info = json.loads((out / "eval_info.json").read_text())
    assert len(info["video_paths"]) == 3
    recorded = {e["video"]: e for e in info["per_episode"] if e["video"]}
    assert {episode["site"] for episode in recorded.values()} == set(SITES)
    for path, episode in recorded.items():
        with av.open(str(out / path)) as container:
            frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
        assert len(frames) == episode["steps"] + 1  # the reset frame, then one per step
        assert frames[0].shape == (480, 480, 3) and frames[-1].std() > 10  # a rendered scene, not a blank


@pytest.mark.slow
def test_evaluation_seeds_are_held_out_from_the_training_seeds(compared, reach_fleet):
    info = json.loads((compared[1] / "eval_info.json").read_text())
    store = FleetStore.open(reach_fleet)
    assert info["setup"]["fleet_seed"] == store.manifest["seed"] == 0
    for robot in store.robots:
        training = trained_seeds(store, robot)
        assert len(training) == 8  # all the robot's training episodes
        evaluated = {e["seed"] for e in info["per_episode"] if e["robot_id"] == robot}
        assert evaluated == {episode_seed(0, robot, i, stream="evaluate") for i in range(4)}
        assert not evaluated & training


def test_a_seed_that_was_trained_on_is_skipped():
    first_three = held_out_seeds(0, 5, 3)
    assert held_out_seeds(0, 5, 2, exclude={first_three[0]}) == first_three[1:]


def test_episode_offset_gives_a_validation_range_disjoint_from_the_reported_seeds(checkpoint):
    reported = make_plan(EvalConfig(checkpoint=str(checkpoint), robots=2, episodes=3))
    validation = make_plan(EvalConfig(checkpoint=str(checkpoint), robots=2, episodes=3, episode_offset=1000))
    for robot in (0, 1):
        assert validation.seeds[robot] == [episode_seed(0, robot, i, stream="evaluate") for i in range(1000, 1003)]
        assert not set(validation.seeds[robot]) & set(reported.seeds[robot])
    assert validation.to_dict()["held_out"].endswith("episodes from 1000 on")


def test_robot_offset_evaluates_robots_never_trained_on(checkpoint):
    plan = make_plan(EvalConfig(checkpoint=str(checkpoint), robots=2, robot_offset=3))
    assert [p.robot_id for p in plan.robots] == [3, 4]
    assert plan.to_dict()["training_robots"] == [0, 1, 2] and plan.to_dict()["unseen_robots"] == [3, 4]


@pytest.mark.slow
def test_the_expert_baseline_equals_the_expert_run_directly(tmp_path):
    info = run_evaluation(EvalConfig(expert=True, task="push", robots=3, episodes=2, out=str(tmp_path / "eval"),
                                     workers=2, quiet=True))
    assert info["agent"] == "expert" and info["checkpoint"] is None
    assert info == json.loads((tmp_path / "eval" / "eval_info.json").read_text())
    spec = resolve_task("push")
    for record in info["per_episode"]:
        profile = make_robot(record["robot_id"])
        env, expert = spec.make_env(profile), spec.make_expert(profile)
        direct = run_episode(env, expert, record["seed"], reset_policy=expert.reset)
        assert (record["success"], record["steps"]) == (direct.success, direct.length)
    assert info["fleet"]["pc_success"] == 100.0


def job(checkpoint, robot_id: int, batch: int, episodes: int = 4) -> RobotJob:
    return RobotJob("policy", make_robot(robot_id).to_dict(), "reach", tuple(held_out_seeds(0, robot_id, episodes)),
                    str(checkpoint), (), 96, batch, "cpu")


def test_envs_in_lockstep_equal_one_episode_at_a_time(checkpoint):
    one = evaluate_robot(job(checkpoint, 1, batch=1))
    lockstep = evaluate_robot(job(checkpoint, 1, batch=3))  # a wave of 3, then a wave of 1
    for a, b in zip(one, lockstep, strict=True):
        assert (a["seed"], a["success"], a["steps"]) == (b["seed"], b["success"], b["steps"])
        assert a["sum_reward"] == pytest.approx(b["sum_reward"], abs=1e-5)  # batched matmuls round differently


def test_n_action_steps_replaces_the_checkpoints_for_evaluation(checkpoint):
    def predictions(policy, steps: int = 6) -> int:
        calls, predict = [], policy.predict_chunk
        policy.predict_chunk = lambda window: calls.append(1) or predict(window)
        observation = {name: np.zeros(shape, dtype=np.float32) for name, shape in policy.spec.features.items()}
        for _ in range(steps):
            policy.select_action(observation)
        return len(calls)

    trained = load_policy(checkpoint)[0]
    assert trained.spec.n_action_steps == 8 and predictions(trained) == 1
    assert predictions(load_policy(checkpoint, n_action_steps=1)[0]) == 6  # one prediction per step
    plan = make_plan(EvalConfig(checkpoint=str(checkpoint), robots=1, n_action_steps=2))
    assert plan.checkpoint_info["n_action_steps"] == 2
    assert make_plan(EvalConfig(checkpoint=str(checkpoint), robots=1)).checkpoint_info["n_action_steps"] == 8


def test_a_robots_personal_weights_are_used_for_that_robot_only(checkpoint, tmp_path):
    content = open_checkpoint(checkpoint)
    head = {key: torch.zeros_like(content.weights[key]) for key in load_policy(checkpoint)[0].head_keys()}
    content.personal = {1: head}  # robot 1's head outputs the mean action: it cannot steer to the goal
    path = content.write(tmp_path / "personal")
    for robot, changed in ((0, False), (1, True)):
        shared, personal = evaluate_robot(job(checkpoint, robot, 4)), evaluate_robot(job(path, robot, 4))
        same = [a["sum_reward"] == b["sum_reward"] for a, b in zip(shared, personal)]
        assert not any(same) if changed else all(same)


# ----- refusals: a one-line error, exit 2, nothing written ---------------------------------------------------
def _truncated(checkpoint, tmp_path):
    copy = shutil.copytree(latest_checkpoint(checkpoint), tmp_path / "truncated")
    data = (copy / "model.safetensors").read_bytes()
    (copy / "model.safetensors").write_bytes(data[: len(data) // 2])
    return ["--checkpoint", copy]


def _other_schema(checkpoint, tmp_path):
    content = open_checkpoint(checkpoint)
    content.features["observation.state"]["shape"] = [21]  # trained on a robot with another state vector
    return ["--checkpoint", content.write(tmp_path / "schema")]


def _collection_moved(checkpoint, tmp_path, recorded: bool = False):
    """The checkpoint, its training collection moved away; without its record of that collection's
    fleet seed unless ``recorded`` (as a converted old-format checkpoint)."""
    content = open_checkpoint(checkpoint)
    content.data = str(tmp_path / "moved")
    if not recorded:
        content.identity = None
    return ["--checkpoint", content.write(tmp_path / "moved")]


def _collection_without_seed(checkpoint, tmp_path):
    content = open_checkpoint(checkpoint)
    data = shutil.copytree(core.files.from_repo(content.data), tmp_path / "data")
    manifest = json.loads((data / "manifest.json").read_text())
    del manifest["seed"]
    (data / "manifest.json").write_text(json.dumps(manifest))
    content.data = str(data)
    return ["--checkpoint", content.write(tmp_path / "unseeded")]


def _names_code(checkpoint, tmp_path):
    """A forged checkpoint whose task is a module to import: ``this`` prints the Zen of Python when imported."""
    content = open_checkpoint(checkpoint)
    content.task = {**content.task, "reference": "this:TASK"}
    return ["--checkpoint", content.write(tmp_path / "forged")]


def _not_a_checkpoint(checkpoint, tmp_path):
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "checkpoint.json").write_text('{"model": {}}')
    return ["--checkpoint", tmp_path / "foreign"]


@pytest.mark.parametrize("arguments, message", [
    (lambda c, t: ["--checkpoint", t / "missing"], "no checkpoint at"),
    (_truncated, "model.safetensors is damaged: it holds"),
    (_not_a_checkpoint, "is not a RoboFleet checkpoint: checkpoint.json lacks format, policy_spec"),
    (lambda c, t: ["--checkpoint", c, "--task", "pick_place"], "trained on task 'reach', not 'pick_place'"),
    (_other_schema, "schema mismatch: the checkpoint's observation.state has shape [21], the env's [20]"),
    (lambda c, t: [], "--checkpoint is required"),
    (lambda c, t: ["--checkpoint", c, "--episodes", "0"], "--episodes must be at least 1"),
    (lambda c, t: ["--checkpoint", c, "--episode-offset", "-1"], "--episode-offset must be at least 0"),
    (lambda c, t: ["--checkpoint", c, "--seed", "-1"], "--seed must not be negative, got -1"),
    (lambda c, t: ["--checkpoint", c, "--n-action-steps", "17"],
     "--n-action-steps 17 is longer than the mlp policy's chunk of 16 actions"),
    (_collection_moved, "the fleet seed is unknown (its training collection "),
    (_collection_without_seed, "manifest.json is not a RoboFleet manifest: it lacks seed"),
    (_names_code, "names the plug-in task 'this:TASK', which would import code: RoboFleet imports only what you "
                  "name, so pass --task this:TASK if you trust it"),
    pytest.param(lambda c, t: ["--checkpoint", c, "--device", "cuda"], "--device cuda: torch finds no CUDA GPU",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")),
], ids=["missing", "truncated", "foreign", "wrong-task", "schema", "no-checkpoint", "bad-option", "bad-offset",
        "bad-seed", "long-chunk", "collection-moved", "no-manifest-seed", "names-code", "no-gpu"])
def test_bad_checkpoints_and_options_are_refused(checkpoint, tmp_path, capsys, arguments, message):
    out = tmp_path / "eval"
    with pytest.raises(SystemExit) as exit_info:
        evaluate_main([*map(str, arguments(checkpoint, tmp_path)), "--out", str(out), "--quiet"])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    error = captured.err.strip()
    assert message in error and error.count("\n") == 0
    assert "Beautiful is better than ugly" not in captured.out  # no module the checkpoint names was imported
    assert not out.exists() and not list(tmp_path.glob(".eval.*"))


def test_a_given_or_recorded_fleet_seed_stands_in_for_a_collection_that_is_gone(checkpoint, tmp_path):
    plan = make_plan(EvalConfig(checkpoint=str(_collection_moved(checkpoint, tmp_path)[1]), robots=1, seed=0))
    assert (plan.fleet_seed, plan.seeds_from) == (0, "--seed")
    assert plan.held_out == "dev split: evaluate seed stream (disjoint from the collect stream)"
    recorded = _collection_moved(checkpoint, tmp_path / "recorded", recorded=True)[1]
    plan = make_plan(EvalConfig(checkpoint=str(recorded), robots=1))
    assert (plan.fleet_seed, plan.seeds_from) == (0, "the checkpoint's record of its training collection")


@pytest.mark.slow
def test_the_next_evaluate_removes_what_killed_runs_left_beside_its_output(tmp_path, capsys):
    killed = tmp_path / ".eval.staging-abc123"  # as a SIGKILLed run leaves it: no run writes it, under the lock
    killed.mkdir()
    (killed / "eval_info.json").write_text("{}")
    other_output = tmp_path / ".eval2.staging-def456"
    other_output.mkdir()
    run_evaluation(EvalConfig(expert=True, task="reach", robots=1, episodes=1, out=str(tmp_path / "eval"),
                              workers=1, quiet=True))
    assert not killed.exists() and other_output.is_dir()
    assert_one_line(capsys.readouterr().err, "warning: removed 1 unfinished output(s) of killed evaluate runs")
    assert (tmp_path / "eval" / "eval_info.json").is_file()


def test_an_output_directory_is_replaced_only_when_it_holds_an_evaluation(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds no evaluation"):
        check_out(other, overwrite=True)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "eval_info.json").write_text("{}")
    with pytest.raises(ValueError, match="use --overwrite"):
        check_out(earlier, overwrite=False)
    check_out(earlier, overwrite=True)
    check_out(tmp_path / "new", overwrite=False)


# ----- episodes that crash ----------------------------------------------------------------------------------
class FlakyReachEnv(ReachEnv):
    """Reach, but by seed: ``seed % 3 == 1`` goes unstable at step 3, ``seed % 3 == 2`` raises at step 2."""

    def reset(self, *, seed=None, options=None):
        self.flaw, self.steps = seed % 3, 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if self.flaw == 1 and self.steps == 3:
            self.data.qvel[:] = 1e30  # MuJoCo flags the bad state and resets it
        if self.flaw == 2 and self.steps == 2:
            raise RuntimeError("contact solver exploded")
        return super().step(action)


if "evaltest/FlakyReach-v0" not in gym.registry:
    gym.register("evaltest/FlakyReach-v0", entry_point=FlakyReachEnv, max_episode_steps=60)
FLAKY_REACH = TaskSpec("flaky_reach", "evaltest/FlakyReach-v0", ReachExpert)
EXPECTED_FAILURE = {0: None, 1: "simulator unstable: MuJoCo mjWARN_BADQVEL",
                    2: "env step raised RuntimeError: contact solver exploded"}


@pytest.mark.slow
def test_an_episode_that_crashes_is_a_failure_with_its_reason_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo logs its instability warnings to MUJOCO_LOG.TXT in the working directory
    info = run_evaluation(EvalConfig(expert=True, task=f"{__name__}:FLAKY_REACH", robots=2, episodes=6, batch=4,
                                     out=str(tmp_path / "eval"), workers=2, quiet=True))
    assert info["fleet"]["n_episodes"] == 12
    for record in info["per_episode"]:
        reason = EXPECTED_FAILURE[record["seed"] % 3]
        assert record["success"] is (reason is None), record
        assert (record["error"] or "").startswith(reason or ""), record
    crashed = sum(record["error"] is not None for record in info["per_episode"])
    assert crashed > 0 and info["fleet"]["n_errors"] == crashed
    assert info["fleet"]["n_success"] == 12 - crashed  # the others, in the same waves, ran to success


def test_a_policy_that_outputs_nan_fails_its_episodes_with_the_reason(checkpoint, tmp_path):
    content = open_checkpoint(checkpoint)
    content.weights = {key: value.fill_(float("nan")) if key in load_policy(checkpoint)[0].head_keys() else value
                       for key, value in content.weights.items()}
    records = evaluate_robot(job(content.write(tmp_path / "nan"), 0, batch=2, episodes=3))
    assert [(r["success"], r["steps"], r["error"]) for r in records] == [(False, 0, "the agent's action is not finite")] * 3


@pytest.mark.slow
def test_eval_speed_benchmark_measures_every_setup_and_writes_only_its_out(checkpoint, tmp_path, capsys):
    from benchmarks import eval_speed

    before, tables, out = git_status(), tmp_path / "README.md", tmp_path / "speed.json"
    result = eval_speed.main(["--checkpoint", str(checkpoint), "--robots", "2", "--episodes", "2", "--rounds", "1",
                              "--tables", str(tables), "--out", str(out)])
    assert set(result["episodes_per_s_best"]) == {"loop", "loop_batch1", "eval_1w", "eval_2w"}
    assert all(rate > 0 for rate in result["episodes_per_s_best"].values())
    assert result["ratios"]["eval_2w_vs_loop"] > 0 and result["job"]["task"] == "reach"
    assert json.loads(out.read_text())["ratios"] == result["ratios"]
    assert "reach 2x2" in capsys.readouterr().out
    assert not tables.exists() and git_status() == before  # a user's checkpoint: no rows, nothing in the repository


@pytest.mark.slow
def test_an_image_policy_gets_the_cameras_and_image_size_it_was_trained_on(camera_fleet, tmp_path):
    run = tmp_path / "cnn"
    completed = subprocess.run(
        [sys.executable, str(REPO / "train" / "bc.py"), "--data", str(camera_fleet), "--out", str(run),
         "--policy", "cnn", "--max-steps", "2", "--batch-size", "8", "--val-fraction", "0", "--log-interval", "2"],
        capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    config = EvalConfig(checkpoint=str(run), robots=1, episodes=2, out=str(tmp_path / "eval"))
    plan = make_plan(config)
    assert (plan.cameras, plan.image_size) == (("front",), 32)
    (robot_job,) = make_jobs(config, plan, tmp_path / "videos")
    records = evaluate_robot(robot_job)
    assert len(records) == 2 and all(r["error"] is None and r["steps"] >= 1 for r in records)


class ExpertThatGivesUp(ReachExpert):
    def __call__(self, observation):
        raise ValueError("no plan for this goal")


GIVING_UP = TaskSpec("giving_up", "robofleet/Reach-v0", ExpertThatGivesUp)


def test_an_agent_that_raises_fails_the_episodes_of_its_wave_with_the_reason():
    robot_job = RobotJob("expert", make_robot(0).to_dict(), f"{__name__}:GIVING_UP", (1, 2, 3), None, (), 96, 2, "cpu")
    records = evaluate_robot(robot_job)
    assert [(r["success"], r["steps"], r["error"]) for r in records] == \
        [(False, 0, "expert raised ValueError: no plan for this goal")] * 3


def test_eval_info_records_the_checkpoint_relative_to_the_repository(checkpoint, monkeypatch):
    monkeypatch.setattr(core.files, "REPO", checkpoint.parent.resolve())
    recorded = make_plan(EvalConfig(checkpoint=str(checkpoint), robots=1)).checkpoint_info["path"]
    assert recorded.startswith(f"{checkpoint.name}/checkpoints/")  # the run's latest checkpoint, from the "repository"
    assert core.files.from_repo(recorded).is_dir()
