"""evaluate on many tasks: per-task and per-group figures, robots' tasks and episodes, task_index, --positions."""

import json

import numpy as np
import pytest

from collect_helpers import collected
from fault_helpers import assert_one_line
from train_helpers import train
from eval import EvalConfig, run_evaluation
from eval.cli import main as evaluate_main
from eval.engine import make_jobs
from eval.plan import make_plan
from eval.report import comparison, evaluation_tables, format_task_table, wilson_interval
from eval.rollout import RobotJob, evaluate_robot, robot_env
from eval.tasks import share_episodes
from sim.experts import ReachExpert
from sim.fleet import RobotProfile, fleet_task, make_robot
from sim.metaworld_tasks import GROUPS, task_name
from sim.tasks import TaskSpec, resolve_task
from train.checkpoint import open_checkpoint

MT10 = [task_name(task) for task in GROUPS["metaworld/mt10"]]


def made_up(task: str, outcomes: str, robot_id: int, agent: str = "policy") -> list[dict]:
    """One record per character of ``outcomes`` (1 a success, 0 a failure, x a crash)."""
    return [{"robot_id": robot_id, "site": "office", "task": task, "agent": agent, "episode": i, "seed": i,
             "success": outcome == "1", "steps": 10, "sum_reward": 1.0, "max_reward": 1.0,
             "error": "env step raised" if outcome == "x" else None, "video": None}
            for i, outcome in enumerate(outcomes)]


def test_per_task_and_per_group_figures_from_made_up_episodes():
    # reach and window-open are easy, peg-insert-side medium, push hard; reach runs on two robots
    records = (made_up("metaworld/reach-v3", "11110", 0) + made_up("metaworld/reach-v3", "11111", 10)
               + made_up("metaworld/window-open-v3", "1100000000", 1) + made_up("metaworld/peg-insert-side-v3",
                                                                                 "111x", 2)
               + made_up("metaworld/push-v3", "0000000000", 3))
    tables = evaluation_tables(records, eval_s=1.0, episodes_run=len(records))
    counts = {task: (f["n_episodes"], f["n_success"], f["n_errors"]) for task, f in tables["per_task"].items()}
    assert counts == {"metaworld/reach-v3": (10, 9, 0), "metaworld/window-open-v3": (10, 2, 0),
                      "metaworld/peg-insert-side-v3": (4, 3, 1), "metaworld/push-v3": (10, 0, 0)}
    assert list(counts) == ["metaworld/reach-v3", "metaworld/window-open-v3", "metaworld/peg-insert-side-v3",
                            "metaworld/push-v3"]  # easy to hard, by name within a group
    groups = tables["per_group"]
    assert list(groups) == ["metaworld/easy", "metaworld/medium", "metaworld/hard"]  # no very_hard task ran
    assert [(g["n_episodes"], g["n_success"], g["pc_success"]) for g in groups.values()] == \
        [(20, 11, 55.0), (4, 3, 75.0), (10, 0, 0.0)]
    assert groups["metaworld/easy"]["ci95"] == wilson_interval(11, 20)
    assert tables["fleet"]["n_success"] == sum(g["n_success"] for g in groups.values())

    expert = evaluation_tables([{**r, "agent": "expert", "success": True, "error": None} for r in records], 1.0, 1)
    compared = comparison(tables, expert)
    assert compared["group metaworld/medium"] == {"policy_pc_success": 75.0, "expert_pc_success": 100.0,
                                                  "policy_over_expert": 0.75}
    assert compared["task metaworld/push-v3"]["policy_over_expert"] == 0.0
    table = format_task_table({**tables, "expert": expert}).splitlines()
    assert len(table) == 1 + 4 + 3 and table[3].split()[:3] == ["metaworld/peg-insert-side-v3", "1", "4"]
    assert table[-1].split()[:5] == ["metaworld/hard", "1", "10", "0.0%", "[0.0,"]

    one_task = evaluation_tables(made_up("reach", "10", 0), 1.0, 2)
    assert "per_group" not in one_task and "task reach" not in comparison(one_task, one_task)


def test_each_tasks_episodes_are_shared_over_the_robots_that_run_it():
    for robots, episodes in [(10, 10), (20, 10), (25, 10), (10, 1), (37, 7)]:
        shares = share_episodes(MT10, list(range(5, 5 + robots)), episodes)
        assert all(task == fleet_task(MT10, robot_id) for robot_id, (task, _) in shares.items())
        per_task = {task: [n for t, n in shares.values() if t == task] for task in MT10}
        assert all(sum(counts) == episodes and max(counts) - min(counts) <= 1 for counts in per_task.values())
    with pytest.raises(ValueError, match="robots 0..8 run no episode of metaworld/window-close-v3 .*more robots"):
        share_episodes(MT10, list(range(9)), 10)
    with pytest.raises(ValueError, match="put 3 robots on metaworld/reach-v3, more than its --episodes 2"):
        share_episodes(MT10, list(range(30)), 2)


class TaskIndexExpert(ReachExpert):
    """Reach's expert that insists on finding its task's index (3) in every observation, as a multi-task policy does."""

    def __call__(self, observation: dict) -> np.ndarray:
        index = observation.get("task_index")
        if index is None or index.dtype != np.int64 or index.tolist() != [3]:
            raise ValueError(f"task_index is {index!r}")
        return super().__call__(observation)


TOLD_ITS_TASK = TaskSpec("told_its_task", "robofleet/Reach-v0", TaskIndexExpert)


def test_every_observation_carries_the_robots_task_index():
    job = RobotJob("expert", make_robot(0).to_dict(), f"{__name__}:TOLD_ITS_TASK", (1, 2, 3), None, (), 96, 2, "cpu")
    told = evaluate_robot(RobotJob(**{**job.__dict__, "task_index": 3}))
    assert [r["error"] for r in told] == [None] * 3 and all(r["steps"] > 1 for r in told)
    untold = evaluate_robot(job)
    assert [r["error"] for r in untold] == ["expert raised ValueError: task_index is None"] * 3


def test_each_robot_runs_its_fleet_task_with_its_index_in_the_group(tmp_path):
    config = EvalConfig(expert=True, task="metaworld/very_hard", robots=7, episodes=3)
    plan = make_plan(config)
    group = [task_name(task) for task in GROUPS["metaworld/very_hard"]]
    assert plan.tasks == group and plan.task_name == "metaworld/very_hard"
    jobs = make_jobs(config, plan, tmp_path)
    assert [job.task for job in jobs] == [fleet_task(group, k) for k in range(7)]
    assert [job.task_index for job in jobs] == [group.index(fleet_task(group, k)) for k in range(7)]
    assert [len(job.seeds) for job in jobs] == [2, 2, 3, 3, 3, 1, 1]  # robots 5 and 6 share tasks 0 and 1
    assert plan.to_dict()["positions"] == "random" and plan.to_dict()["tasks"] == group


def first_states(job: RobotJob) -> list[np.ndarray]:
    """The first observation's environment_state of each of the job's episodes, from the env the job makes."""
    spec, profile = resolve_task(job.task), RobotProfile.from_dict(job.profile)
    env = robot_env(job, spec, profile)
    try:
        return [env.reset(seed=seed)[0]["observation.environment_state"] for seed in job.seeds]
    finally:
        env.close()


@pytest.mark.slow
def test_fixed_positions_start_every_episode_of_a_task_from_the_same_objects_and_goal(tmp_path):
    def states(positions):
        config = EvalConfig(expert=True, task="metaworld/hard", robots=8, episodes=4, positions=positions)
        jobs = make_jobs(config, make_plan(config), tmp_path)
        return {job.profile["robot_id"]: (job.task, first_states(job)) for job in jobs}

    fixed, drawn = states("fixed"), states(None)
    for task in GROUPS["metaworld/hard"]:
        starts = [s for t, robot_states in fixed.values() if t == task_name(task) for s in robot_states]
        assert len(starts) == 4 and all(np.array_equal(starts[0], s) for s in starts[1:]), task
        randoms = [s for t, robot_states in drawn.values() if t == task_name(task) for s in robot_states]
        assert not any(np.array_equal(randoms[0], s) for s in randoms[1:]), task


@pytest.mark.slow
def test_the_expert_alone_on_a_group_reports_per_task_and_per_group(tmp_path, capsys):
    out = tmp_path / "eval"
    evaluate_main(["--expert", "--task", "metaworld/hard", "--robots", "8", "--episodes", "2", "--positions",
                   "fixed", "--out", str(out), "--workers", "2", "--batch", "2"])
    console = capsys.readouterr().out
    info = json.loads((out / "eval_info.json").read_text())
    hard = [task_name(task) for task in GROUPS["metaworld/hard"]]
    assert list(info["per_task"]) == sorted(hard) and info["setup"]["tasks"] == hard
    assert (out / "success_tasks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(figures["n_episodes"] == 2 for figures in info["per_task"].values())
    assert list(info["per_group"]) == ["metaworld/hard"] and info["per_group"]["metaworld/hard"]["n_episodes"] == 12
    assert info["setup"]["positions"] == "fixed" and info["fleet"]["n_robots"] == 8
    assert {row["robot_id"]: row["task"] for row in info["per_robot"]} == {k: fleet_task(hard, k) for k in range(8)}
    assert "\nexpert on metaworld/hard: 6 tasks x 2 episodes on 8 robots; fixed positions" in console
    assert all(task in console for task in hard) and "metaworld/hard " in console


@pytest.mark.parametrize("arguments, message", [
    (["--expert", "--task", "metaworld/mt10", "--positions", "moved"], "--positions must be one of random, fixed"),
    (["--expert", "--task", "reach", "--positions", "fixed"], "--positions fixed: task reach takes no positions"),
    (["--expert", "--task", "metaworld/mt10", "--robots", "4"], "robots 0..3 run no episode of"),
], ids=["bad-value", "arm-task", "too-few-robots"])
def test_bad_positions_and_too_few_robots_are_one_line(tmp_path, capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_info:
        evaluate_main([*arguments, "--out", str(tmp_path / "eval"), "--quiet"])
    assert exit_info.value.code == 2
    assert_one_line(capsys.readouterr().err, message)
    assert not (tmp_path / "eval").exists()


@pytest.mark.slow
def test_a_multi_task_checkpoint_is_evaluated_per_task_beside_the_expert(tmp_path_factory):
    fleet = collected(tmp_path_factory, "very_hard", "--task", "metaworld/very_hard", "--robots", "5", "--episodes",
                      "1", "--workers", "2")
    run = tmp_path_factory.mktemp("very_hard_run") / "run"
    completed = train("--data", fleet, "--out", run, "--max-steps", "30")
    assert completed.returncode == 0, completed.stderr[-3000:]
    checkpoint = open_checkpoint(run)
    tasks = checkpoint.task["tasks"]
    assert "task_index" in checkpoint.spec.features  # the policy reads its task as an input

    info = run_evaluation(EvalConfig(checkpoint=str(run), robots=5, episodes=1, compare=True, workers=2, quiet=True,
                                     out=str(tmp_path_factory.mktemp("very_hard_eval") / "eval")))
    assert info["setup"]["tasks"] == tasks and info["task"] == "metaworld/very_hard"
    assert [r["error"] for r in info["per_episode"]] == [None] * 5  # the policy found task_index in every step
    for agent in (info, info["expert"]):
        assert sorted(agent["per_task"]) == sorted(tasks) and list(agent["per_group"]) == ["metaworld/very_hard"]
        assert {row["robot_id"]: row["task"] for row in agent["per_robot"]} == {k: fleet_task(tasks, k)
                                                                             for k in range(5)}
    assert {f"task {task}" for task in tasks} | {"group metaworld/very_hard"} <= set(info["compare"])
