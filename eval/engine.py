"""Runs an evaluation on dask: one task per robot (and per agent), progress, retries, the outputs.

The cluster is the ground floor's (``core.cluster.dask_client``): a ``LocalCluster`` of
worker processes by default, any cluster with ``--scheduler``. A task that raises is
retried, and dask reschedules the task of a worker that dies; a robot's episodes are
a pure function of its seeds, so a rerun gives the same records. With a remote
cluster, the checkpoint and EVAL must be on a filesystem the workers share.

The workers load a copy of the checkpoint that the evaluation read and verified, written in
its staging folder (``eval.plan.pin_checkpoint``): a training run may prune its old
checkpoints while one of them is evaluated.
"""

from __future__ import annotations

import importlib
import shutil
import time
from pathlib import Path

from distributed import as_completed

from collect.engine import TASK_RETRIES
from core.cluster import dask_client
from core.files import code_version, repo_relative
from core.progress import progress_bar
from eval import ledger
from eval.config import EvalConfig
from eval.output import publish, staging, write_outputs
from eval.plan import PINNED_CHECKPOINT, EvalPlan, make_plan, pin_checkpoint
from eval.report import comparison, evaluation_tables
from eval.rollout import RobotJob, evaluate_robot
from eval.video import pick_video_episodes


def make_jobs(config: EvalConfig, plan: EvalPlan, video_dir: Path) -> list[RobotJob]:
    """One job per robot and agent; videos go to the first agent's episodes."""
    videos = pick_video_episodes(plan.robots, min(map(len, plan.seeds.values())), config.videos)
    return [
        RobotJob(agent, profile.to_dict(), plan.robot_tasks[profile.robot_id], tuple(plan.seeds[profile.robot_id]),
                 plan.checkpoint, plan.cameras, plan.image_size, config.batch, config.device, config.n_action_steps,
                 videos.get(profile.robot_id, ()) if agent == config.agents[0] else (), str(video_dir), plan.fps,
                 max_parameters=config.max_parameters, positions=plan.positions,
                 task_index=plan.tasks.index(plan.robot_tasks[profile.robot_id]) if plan.tasks else None)
        for agent in config.agents for profile in plan.robots
    ]


def run_jobs(config: EvalConfig, jobs: list[RobotJob]) -> tuple[list[dict], float]:
    """Every job's episode records, and the seconds from the first submit to the last result."""
    records: list[dict] = []
    with dask_client(config.scheduler, config.workers, ("collect.worker",), show_dashboard=not config.quiet) as client:
        client.run(importlib.import_module, "eval.rollout")  # torch and mujoco load before the clock starts
        started = time.perf_counter()
        futures = {client.submit(evaluate_robot, job, retries=TASK_RETRIES, pure=False): job for job in jobs}
        with progress_bar(total=sum(len(job.seeds) for job in jobs), desc="episodes", unit="ep",
                          disable=config.quiet) as bar:
            try:
                for future in as_completed(futures):
                    try:
                        result = future.result()
                    except Exception as error:  # the task raised on every try, or its workers kept dying
                        job = futures[future]
                        raise RuntimeError(f"robot {job.profile['robot_id']} ({job.agent}) failed after "
                                           f"{TASK_RETRIES} retries: {type(error).__name__}: {error}") from error
                    records += result
                    bar.update(len(result))
            finally:
                client.cancel(list(futures))
        eval_s = time.perf_counter() - started  # the cluster's shut-down is not the evaluation's time
    return records, eval_s


def record_test_evaluation(config: EvalConfig, plan: EvalPlan, info: dict, out: Path) -> dict:
    """The ledger's line for a test evaluation, appended; its question and count, for eval_info.json."""
    digest = (plan.checkpoint_info or {}).get("sha256")
    question = config.question or ledger.default_question(digest, plan.task_name)
    count = ledger.record(Path(config.ledger), {
        "question": question, "checkpoint_sha256": digest, "store_manifest_sha256": plan.store_manifest_sha256,
        "task": plan.task_name, "config": config.to_dict(), "robots": [p.robot_id for p in plan.robots],
        "episodes": config.episodes, "pc_success": info["fleet"]["pc_success"], "out": repo_relative(out)})
    return {"question": question, "test_evaluations": count}


def run_evaluation(config: EvalConfig) -> dict:
    """Evaluate, write EVAL (config.out) and return the eval_info dict.

    Raises ValueError, before anything is written, for a bad checkpoint, task, schema,
    output directory or scheduler.
    """
    plan = make_plan(config)
    out = Path(config.out)
    if config.split == "test":
        ledger.entries(Path(config.ledger))  # a damaged ledger stops the run before it starts
    with staging(out, config.overwrite) as directory:
        pinned = pin_checkpoint(plan, directory)
        records, eval_s = run_jobs(config, make_jobs(config, pinned, directory / "videos"))
        shutil.rmtree(directory / PINNED_CHECKPOINT, ignore_errors=True)
        by_agent = {agent: [r for r in records if r["agent"] == agent] for agent in config.agents}
        main = config.agents[0]
        info = {"agent": main, "task": plan.task_name, **evaluation_tables(by_agent[main], eval_s, len(records))}
        if config.compare:
            info["expert"] = evaluation_tables(by_agent["expert"], eval_s, len(records))
            info["compare"] = comparison(info, info["expert"])
        info.update({
            "video_paths": [r["video"] for r in info["per_episode"] if r["video"]],
            "setup": plan.to_dict(),
            "config": config.to_dict(),
            "checkpoint": plan.checkpoint_info,
            "code_version": code_version(),
        })
        if config.split == "test":  # before publishing: a publish that fails can only overcount
            info.update(record_test_evaluation(config, plan, info, out))
        write_outputs(directory, info)
        publish(directory, out)
    return info
