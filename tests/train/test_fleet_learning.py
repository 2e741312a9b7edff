"""Fleet learning (train/fleet_learn.py, train/fleet/): gates, the help budget, deployment stores, labels,
resume after a kill, and two rounds end to end under torchrun."""

import json
import math
import shutil
import signal

import numpy as np
import pytest
import torch
import zarr
from safetensors.torch import load_file

from collect.config import CollectConfig
from experiments.fleet_learning import FleetLearningConfig
from collect_helpers import assert_same_stores
from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset.verify import verify_store
from sim.fleet import make_fleet
from sim.tasks import BUILTIN_TASKS
from eval import EvalConfig
from eval.plan import make_plan
from train.checkpoint import open_checkpoint
from train.fleet.deploy import EXPERT, LEDGERS, POLICY, Help, deploy_round
from train.fleet.gates import GATES, GateOptions, ProgressTracker, Signals
from train.fleet.labels import DeploymentLabels, autonomous_successes, labelled_runs, labelled_segments
from train.fleet.operators import Operator, operator_groups, step_shares
from fault_helpers import assert_one_line, exit_code_of, file_tree
from fleet_helpers import columns, deployment, fleet_learn, fleet_learn_arguments
from train.fleet_learn import fresh_round_steps, main as fleet_learn_main

OPTIONS = GateOptions()


def signals(**values) -> Signals:
    """Signals for 4 robots: nothing wrong, except what ``values`` set."""
    base = {"since_progress": np.zeros(4), "regress": np.zeros(4), "disagreement": np.zeros(4),
            "draw": np.ones(4) * 0.99}
    return Signals(**{**base, **{name: np.asarray(value, dtype=float) for name, value in values.items()}})


def test_each_gate_asks_for_what_it_watches_and_fleet_ranks_regress_over_stall_over_uncertainty():
    calm = signals()
    for gate in GATES.values():
        assert not gate(calm, OPTIONS).any()
    assert GATES["random"](signals(draw=[0.5, 0.001, 0.99, 0.01]), OPTIONS).nonzero()[0].tolist() == [1, 3]
    stalled = signals(since_progress=[0, 24, 25, 60], regress=[0.05, 0, 0, 0])
    assert GATES["stall"](stalled, OPTIONS).nonzero()[0].tolist() == [0, 2, 3]
    uncertain = signals(disagreement=[0.1, 0.4, 0.9, 0])
    assert GATES["uncertainty"](uncertain, OPTIONS).nonzero()[0].tolist() == [1, 2]
    mixed = signals(regress=[0, 0.05, 0, 0], since_progress=[30, 0, 0, 0], disagreement=[0, 0, 2.0, 0.5])
    priority = GATES["fleet"](mixed, OPTIONS)
    assert priority[1] > priority[0] > priority[2] >= priority[3] > 0


def test_progress_tracker_counts_steps_without_progress_and_the_fall_below_the_best():
    tracker = ProgressTracker(1, OPTIONS)
    for reward in (-0.30, -0.20, -0.199, -0.198, -0.197):  # then creeping by 1 mm a step: no progress
        tracker.update(0, reward)
    assert tracker.since_progress[0] == 3 and tracker.regress[0] == 0
    tracker.update(0, -0.192)  # 8 mm above the last progress: progress
    assert tracker.since_progress[0] == 0
    tracker.update(0, -0.30)  # the cube falls
    assert tracker.regress[0] == pytest.approx(0.108) and GATES["stall"](
        signals(since_progress=tracker.since_progress.repeat(4), regress=tracker.regress.repeat(4)), OPTIONS).all()
    tracker.restart(0)
    assert tracker.since_progress[0] == 0 and tracker.regress[0] == 0


def test_operators_split_the_fleet_and_the_cap_exactly():
    groups = operator_groups(list(range(10)), 3)
    assert groups == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert operator_groups(list(range(2)), 5) == [[0], [1]]
    for cap, parts in ((10, 3), (2, 5), (7, 7)):
        shares = step_shares(cap, parts)
        assert sum(shares) == cap and max(shares) - min(shares) <= 1


def test_an_operator_helps_one_robot_at_a_time_for_a_segment_and_never_past_its_share():
    rng = np.random.default_rng(0)
    operator, spent, helped_before = Operator(steps_left=50, segment_steps=7), 0, None
    for _ in range(400):
        active = rng.random(5) < 0.9
        helped, started = operator.choose(np.where(rng.random(5) < 0.3, rng.random(5), 0.0), active)
        if helped is not None:
            assert active[helped] and (started or helped == helped_before)
            operator.spend()
            spent += 1
        helped_before = helped
    assert spent == 50 and operator.steps_left == 0
    assert operator.choose(np.ones(5), np.ones(5, dtype=bool)) == (None, False)


def test_an_operator_hands_back_once_the_gate_clears_but_not_before_the_minimum_steps():
    asking, calm, active = np.array([0.0, 1.0]), np.zeros(2), np.ones(2, dtype=bool)
    operator = Operator(steps_left=100, segment_steps=10, min_segment_steps=3)
    assert operator.choose(asking, active) == (1, True)
    operator.spend()
    for _ in range(2):  # the gate is clear, but fewer than 3 expert steps are done
        assert operator.choose(calm, active) == (1, False)
        operator.spend()
    assert operator.choose(calm, active) == (None, False)
    fixed = Operator(steps_left=100, segment_steps=4)  # by default a hand-over lasts its segment, clear or not
    assert fixed.choose(asking, active) == (1, True)
    for _ in range(3):
        fixed.spend()
        assert fixed.choose(calm, active) == (1, False)
    fixed.spend()
    assert fixed.choose(calm, active) == (None, False)


def test_an_operator_hands_back_at_the_segments_end_before_it_chooses_again():
    asking, active = np.array([0.0, 1.0]), np.ones(2, dtype=bool)
    operator = Operator(steps_left=100, segment_steps=2)
    assert operator.hand_back(asking, active) is None  # helping nobody yet
    assert operator.choose(asking, active) == (1, True)
    operator.spend()
    assert operator.hand_back(asking, active) is None  # one step of the segment left
    operator.spend()
    assert operator.hand_back(asking, active) == 1 and operator.helping is None
    calm = np.zeros(2)  # the robot handed back has had its fresh start: nobody asks, nobody is taken
    assert operator.choose(calm, active) == (None, False)


def test_labelled_runs_are_the_stretches_of_true():
    assert labelled_runs(np.array([0, 1, 1, 0, 0, 1, 0, 1, 1], dtype=bool)) == [(1, 3), (5, 6), (7, 9)]
    assert labelled_runs(np.ones(3, dtype=bool)) == [(0, 3)] and labelled_runs(np.zeros(2, dtype=bool)) == []


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(BUILTIN_TASKS))
def test_the_expert_takes_over_from_where_a_policy_left_the_robot(task, trained_run):
    """The scripted experts are phase machines started by ``reset``: reset at a hand-over, they finish
    the task from a state a policy drove to (here: a random policy's, and for pick_place a
    barely trained cnn's), at an early and a late hand-over."""
    from train.checkpoint import load_policy

    spec = BUILTIN_TASKS[task]
    policy = load_policy(trained_run)[0] if task == "pick_place" else None
    for handover in (15, 45):
        for robot in make_fleet(3, 0):
            env, expert, rng = spec.make_env(robot), spec.make_expert(robot), np.random.default_rng(robot.robot_id)
            observation, _ = env.reset(seed=1000 + robot.robot_id)
            if policy is not None:
                policy.reset()
            for step in range(env.spec.max_episode_steps):
                if step < handover:
                    action = policy.select_action(observation) if policy is not None else \
                        rng.uniform(-1, 1, env.action_space.shape)
                else:
                    if step == handover:
                        expert.reset(step)
                    action = expert(observation)
                observation, _, terminated, truncated, info = env.step(np.asarray(action, dtype=np.float32))
                if terminated or truncated:
                    break
            assert info["is_success"], f"{task}: robot {robot.robot_id}, hand-over at step {handover}"
            env.close()


@pytest.mark.parametrize("task", ["pick_place", "stack"])
def test_an_expert_taking_over_a_robot_that_holds_the_cube_carries_it_on(task):
    """A hand-over mid-carry: the new expert keeps the fingers closed (its labels never say let go) and finishes."""
    spec = BUILTIN_TASKS[task]
    for robot in make_fleet(3, 0):
        env, first = spec.make_env(robot), spec.make_expert(robot)
        observation, _ = env.reset(seed=2000 + robot.robot_id)
        first.reset(1)
        while first.phase != "carry":
            observation, *_ = env.step(first(observation))
        second = spec.make_expert(robot)
        second.reset(2)
        grips = []
        for _ in range(env.spec.max_episode_steps):
            action = second(observation)
            grips.append(action[-1])
            observation, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert min(grips[:10]) > 0 and info["is_success"], f"{task}: robot {robot.robot_id}"
        env.close()


@pytest.mark.slow
def test_a_deployment_round_records_who_acted_within_the_help_budget(trained_run, module_scheduler, tmp_path):
    out = tmp_path / "round_1"
    deployment(trained_run, out, scheduler=module_scheduler)
    store = FleetStore.open(out)
    assert store.manifest["lineage"]["mode"] == "stall" and store.manifest["lineage"]["round"] == 1
    acted_total, per_group = 0, {}
    for robot in range(4):
        data, ends, attrs = columns(out, robot)
        assert attrs["lineage"] == store.manifest["lineage"]
        assert (data["acted_by"] == (data["labelled"] > 0)).all()  # the expert's frames, and only they, are labels
        assert set(np.unique(data["acted_by"])) <= {POLICY, EXPERT}
        acted_total += int(data["acted_by"].sum())
        for episode, (start, end) in enumerate(zip([0, *ends[:-1]], ends)):
            per_group.setdefault((robot % 2, episode), []).append(data["acted_by"][start:end, 0])
            # a hand-over lasts its segment at most: a robot handed back gets a fresh start before it can ask again
            assert all(stop - begin <= 15 for begin, stop in labelled_runs(data["acted_by"][start:end, 0] > 0))
    ledgers = [json.loads(path.read_text()) for path in sorted((out / LEDGERS).glob("group_*.json"))]
    assert acted_total == sum(sum(ledger.values()) for ledger in ledgers) and 0 < acted_total <= 120
    for acted in per_group.values():  # robots of one group step in lockstep: one expert at each step at most
        steps = max(len(a) for a in acted)
        assert max(sum(np.pad(a, (0, steps - len(a))) for a in acted)) <= 1
    for episode in select_episodes(store, success=None):
        data, ends, _ = columns(out, episode.robot_id)
        assert episode.success == bool(data["next.success"][episode.end - 1, 0])
    segments = labelled_segments([store])
    assert sum(segment.length for segment in segments) == acted_total
    assert verify_store(store) == []  # what `dataset verify` checks, in this process


@pytest.mark.slow
def test_dagger_labels_every_frame_without_acting(trained_run, module_scheduler, tmp_path):
    deployment(trained_run, tmp_path / "dagger", mode="dagger", robots=1, episodes=1, operators=1,
               scheduler=module_scheduler)
    data, _, _ = columns(tmp_path / "dagger", 0)
    assert (data["acted_by"] == POLICY).all() and data["labelled"].all()
    store = FleetStore.open(tmp_path / "dagger")
    segments = labelled_segments([store])  # the policy's states with the expert's labels: no chunk of them trains
    assert len(segments) == store.manifest["totals"]["frames"] and {s.end - s.start for s in segments} == {1}


@pytest.mark.slow
def test_bc_buys_whole_demonstrations(trained_run, module_scheduler, tmp_path):
    deployment(trained_run, tmp_path / "bc", mode="bc", robots=2, episodes=2, operators=1, help_steps=500,
               scheduler=module_scheduler)
    for robot in range(2):  # wave w's demonstration is by robot w of the group, from its first frame
        data, ends, _ = columns(tmp_path / "bc", robot)
        acted = data["acted_by"][ends[robot - 1] if robot else 0: ends[robot], 0]
        assert acted.all()
        assert (data["acted_by"].sum()) == len(acted)


@pytest.mark.slow
def test_own_successes_are_the_episodes_that_succeeded_without_the_expert(trained_run, module_scheduler, tmp_path):
    out = tmp_path / "round_1"
    deployment(trained_run, out, mode="random", robots=2, episodes=2, operators=1, random_rate=1e-12,  # never helped
               scheduler=module_scheduler)
    for robot, episode in ((0, 1), (1, 0), (1, 1)):  # crafted: three successes, one of them with an expert frame
        group = zarr.open_group(out / f"robot_{robot:04d}.zarr", mode="r+")
        group["meta/episode_success"][episode] = True
    group["data/acted_by"][int(group["meta/episode_ends"][0])] = EXPERT  # robot 1's second episode, its first frame
    store = FleetStore.open(out)
    own = autonomous_successes([store])
    assert [(e.robot_id, e.index) for e in own] == [(0, 1), (1, 0)] and all(e.success for e in own)
    assert DeploymentLabels([store]).episodes() == labelled_segments([store])
    with_own = DeploymentLabels([store], own_successes=True).episodes()
    assert with_own == labelled_segments([store]) + own  # whole episodes: the policy's actions are the targets


@pytest.mark.slow
def test_a_killed_round_resumes_to_the_same_store_and_a_finished_one_is_not_redone(trained_run, pick_place_fleet,
                                                                                     tmp_path):
    whole, killed = (shutil.copytree(trained_run, tmp_path / name / "run", symlinks=True) for name in ("a", "b"))
    assert fleet_learn(whole, pick_place_fleet).returncode == 0
    assert fleet_learn(killed, pick_place_fleet, crash_at="deploy-commit").returncode != 0
    resumed = fleet_learn(killed, pick_place_fleet)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_stores(whole / "fleet" / "round_1", killed / "fleet" / "round_1")
    for ledger in (whole / "fleet" / "round_1" / LEDGERS).glob("*.json"):
        assert ledger.read_text() == (killed / "fleet" / "round_1" / LEDGERS / ledger.name).read_text()
    before = {path: path.stat().st_mtime_ns for path in (whole / "fleet").rglob("*") if path.is_file()
              and path.name != "accounts.json"}
    again = fleet_learn(whole, pick_place_fleet)
    assert again.returncode == 0 and "round 1: deployed already" in again.stdout
    assert before == {path: path.stat().st_mtime_ns for path in before}


@pytest.mark.slow
def test_a_run_killed_after_retraining_accounts_for_the_round_without_training_again(run_copy, pick_place_fleet):
    assert fleet_learn(run_copy, pick_place_fleet, crash_at="fleet-trained").returncode != 0
    trained = open_checkpoint(run_copy).step
    rounds = [a["round"] for a in json.loads((run_copy / "fleet" / "accounts.json").read_text())["rounds"]]
    assert trained == 25 and rounds == [0]  # killed before the round was accounted for
    resumed = fleet_learn(run_copy, pick_place_fleet)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "training" not in resumed.stdout and open_checkpoint(run_copy).step == trained
    accounts = json.loads((run_copy / "fleet" / "accounts.json").read_text())["rounds"]
    assert [account["round"] for account in accounts] == [0, 1] and accounts[1]["episodes"] == 8
    plan = make_plan(EvalConfig(checkpoint=str(run_copy), robots=5)).to_dict()  # robot 3 only deployed
    assert plan["training_robots"] == [0, 1, 2, 3] and plan["unseen_robots"] == [4]


def weights(checkpoint) -> dict:
    return load_file(checkpoint / "model.safetensors")


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.slow
def test_retrain_fresh_trains_a_new_policy_each_round_and_the_next_round_deploys_it(run_copy, pick_place_fleet):
    completed = fleet_learn(run_copy, pick_place_fleet, "--retrain", "fresh", "--rounds", "2", "--own-successes")
    assert completed.returncode == 0, completed.stderr[-3000:]
    fleet = run_copy / "fleet"
    assert open_checkpoint(run_copy).step == 20  # the seed's policy is not carried on
    for round in (1, 2):  # each round's policy trained from initialisation for --round-steps
        assert open_checkpoint(fleet / f"round_{round}_trained").step == 5
        saved = json.loads((fleet / f"round_{round}_trained" / "config.json").read_text())["config"]
        assert saved["retrain"] == "fresh"
    assert "with the expert's labels from 2 deployment round(s) and the policy's own successes" in completed.stdout
    driven = weights(fleet / "round_2_policy")
    assert same_weights(driven, weights(open_checkpoint(fleet / "round_1_trained").path))
    assert not same_weights(driven, weights(open_checkpoint(run_copy).path))
    again = fleet_learn(run_copy, pick_place_fleet, "--retrain", "fresh", "--rounds", "2", "--own-successes")
    assert again.returncode == 0 and "training" not in again.stdout and "round 2: deployed already" in again.stdout


def test_a_fresh_round_trains_its_passes_over_the_labels_at_the_global_batch_and_at_least_round_steps():
    assert fresh_round_steps(5, 0.0, 10_000, 32) == 5  # no --round-epochs: --round-steps alone
    assert fresh_round_steps(5, 1.0, 1000, 32) == 32  # 31.25 steps a pass, rounded up
    assert fresh_round_steps(100, 1.0, 1000, 32) == 100  # never fewer than --round-steps
    assert fresh_round_steps(5, 2.0, 1000, 32 * 2 * 2) == 16  # batch 32 x 2 ranks x 2 micro-batches: 15.6 steps
    assert fresh_round_steps(5, 2.5, 6400, 64) == 250


@pytest.mark.slow
def test_round_epochs_size_each_fresh_policy_by_its_labelled_frames_and_a_rerun_trains_nothing(run_copy,
                                                                                              pick_place_fleet):
    options = ("--retrain", "fresh", "--round-epochs", "1", "--grad-accum", "2")  # global batch 32 x 2
    completed = fleet_learn(run_copy, pick_place_fleet, *options)
    assert completed.returncode == 0, completed.stderr[-3000:]
    fleet = run_copy / "fleet"
    accounts = json.loads((fleet / "accounts.json").read_text())
    frames = accounts["rounds"][1]["labelled_so_far"]  # the seed's frames and round 1's labels
    steps = math.ceil(1 * frames / (32 * 2 * 1))
    assert steps > 5 and open_checkpoint(fleet / "round_1_trained").step == steps
    assert f"round 1: a fresh policy trains {steps:,} steps (1 pass over {frames:,} expert-labelled frames at " \
           "batch 64)" in completed.stdout
    saved = json.loads((fleet / "round_1_trained" / "config.json").read_text())["config"]
    assert saved["round_epochs"] == accounts["config"]["round_epochs"] == 1.0 and saved["optim"]["max_steps"] == steps
    again = fleet_learn(run_copy, pick_place_fleet, *options)
    assert again.returncode == 0 and "training" not in again.stdout and "a fresh policy" not in again.stdout
    assert open_checkpoint(fleet / "round_1_trained").step == steps
    # experiments/fleet_learning.py counts the round as finished from the same accounts: 2 ranks x 32 train at the
    # same global batch; twice the passes are not trained, nor is a round not yet deployed
    experiment = FleetLearningConfig(retrain="fresh", round_epochs=1, round_steps=5, batch_size=32, ranks=2)
    assert experiment.deployment == "_fresh_1_epochs" and experiment.round_trained(run_copy, 1)
    assert not experiment.round_trained(run_copy, 2)
    assert not FleetLearningConfig(retrain="fresh", round_epochs=2, round_steps=5, batch_size=32,
                                   ranks=2).round_trained(run_copy, 1)


@pytest.mark.slow
def test_pretrain_steps_start_each_fresh_policy_from_encoders_pretrained_on_every_recorded_frame(camera_fleet,
                                                                                                 tmp_path):
    run = tmp_path / "run"
    options = ("--policy", "cnn", "--batch-size", "16", "--fleet-robots", "2", "--deploy-episodes", "2",
               "--retrain", "fresh", "--pretrain-steps", "4", "--pretrain-batch-size", "16")
    killed = fleet_learn(run, camera_fleet, *options, crash_at="fleet-pretrained")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert "round 1: pretraining the camera encoders 4 steps" in killed.stdout
    encoders = run / "fleet" / "round_1_encoders"
    written = (encoders / "encoders.json").stat().st_mtime_ns
    assert not (run / "fleet" / "round_1_trained").exists()
    completed = fleet_learn(run, camera_fleet, *options)  # carries on from the encoders the crash left
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "pretraining" not in completed.stdout and (encoders / "encoders.json").stat().st_mtime_ns == written
    description = json.loads((encoders / "encoders.json").read_text())
    stores = [FleetStore.open(camera_fleet), FleetStore.open(run / "fleet" / "round_1")]
    assert description["frames"] == sum(episode.length for episode in select_episodes(stores, success=None))
    assert [store.rsplit("/", 1)[-1] for store in description["stores"]] == [camera_fleet.name, "round_1"]
    trained = json.loads((run / "fleet" / "round_1_trained" / "config.json").read_text())["config"]
    assert trained["init_encoders"] == str(encoders) and trained["pretrain_steps"] == 4
    seed_policy = json.loads((run / "config.json").read_text())["config"]
    assert seed_policy["init_encoders"] == ""  # round 0 starts as --init-encoders says: here at random
    again = fleet_learn(run, camera_fleet, *options)
    assert again.returncode == 0 and "pretraining" not in again.stdout and "a fresh policy" not in again.stdout


@pytest.mark.slow
@pytest.mark.cluster
def test_two_rounds_under_torchrun_train_on_the_seed_and_the_expert_labels(pick_place_fleet, tmp_path):
    run = tmp_path / "run"
    completed = fleet_learn(run, pick_place_fleet, "--rounds", "2", ranks=2)
    assert completed.returncode == 0, completed.stderr[-3000:]
    accounts = json.loads((run / "fleet" / "accounts.json").read_text())["rounds"]
    assert [account["round"] for account in accounts] == [0, 1, 2]
    seed = sum(e.length for e in select_episodes(FleetStore.open(pick_place_fleet)))
    assert accounts[0]["labelled_so_far"] == seed
    assert accounts[2]["labelled_so_far"] == seed + accounts[1]["labelled"] + accounts[2]["labelled"]
    assert all(0 < account["labelled"] <= 80 and account["episodes"] == 8 for account in accounts[1:])
    assert open_checkpoint(run).step == 30 and (run / "fleet" / "round_2_policy").is_dir()
    assert "with the expert's labels from 2 deployment round(s)" in completed.stdout


@pytest.mark.parametrize("options, message", [
    (("--help-steps", "0"), "--help-steps must be at least 1"),
    (("--gate", "loudest"), "--gate must be one of"),
    (("--retrain", "twice"), "--retrain must be one of"),
    (("--gate", "dagger", "--own-successes"), "--own-successes: with --gate dagger the expert labels every"),
    (("--retrain", "fresh", "--round-epochs", "-1"), "--round-epochs must not be negative"),
    (("--round-epochs", "10"), "--round-epochs: with --retrain carry each round trains --round-steps more"),
    (("--operators", "-1"), "--operators must be at least 1"),
    (("--min-segment-steps", "40"), "--min-segment-steps must be in [1, --segment-steps (30)]"),
    (("--max-handovers", "0"), "--max-handovers must be at least 1"),
    (("--pretrain-steps", "10"), "--pretrain-steps: encoders are pretrained for --retrain fresh's policies"),
    (("--retrain", "fresh", "--pretrain-steps", "10"), "--pretrain-steps pretrains a cnn's camera encoders; the mlp"),
    (("--retrain", "fresh", "--pretrain-steps", "-1"), "--pretrain-steps must not be negative"),
    (("--rounds", "0"), "--rounds must be at least 1"),
    (("--stop-after", "7"), "--stop-after must be a round from 0 to --rounds 1, got 7"),
])
def test_bad_options_are_one_line(options, message, pick_place_fleet, tmp_path, capsys):
    """fleet_learn.py's main in this process (its bad input as users meet it: the refusals below and
    tests/train/test_fleet_continuous.py's)."""
    assert exit_code_of(fleet_learn_main, fleet_learn_arguments(tmp_path / "run", pick_place_fleet, *options)) == 2
    assert_one_line(capsys.readouterr().err, message)


@pytest.mark.slow
def test_a_run_of_another_task_or_a_policy_the_fleet_cannot_render_is_refused(trained_run, camera_fleet,
                                                                             camera_cnn_run, tmp_path):
    run = shutil.copytree(trained_run, tmp_path / "run", symlinks=True)
    before = file_tree(run)
    completed = fleet_learn(run, camera_fleet)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert_one_line(completed.stderr, f"cannot resume {run}: it was trained on task pick_place, not reach")
    assert file_tree(run) == before  # refused before anything is written
    config = CollectConfig(robots=2, episodes=1, task="reach", out=str(tmp_path / "blind"), keep_failures=True,
                           workers=1, quiet=True)
    with pytest.raises(ValueError, match="observation.images.front, which the fleet does not render"):
        deploy_round(config, str(open_checkpoint(camera_cnn_run).path), 1, Help("stall", OPTIONS, 10, 1), 10, {})
