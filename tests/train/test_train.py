"""train/bc.py: one process and torchrun ranks, checkpoints that resume and load for evaluation."""

import json
import subprocess
import time

import numpy as np
import pytest
import torch

from sim.fleet import make_robot
from sim.tasks import resolve_task
from train.checkpoint import latest_checkpoint, load_policy, open_checkpoint
from collect_helpers import REPO, default_sigint, interrupt
from fault_helpers import assert_one_line, exit_code_of
from train.bc import main as bc_main
from train_helpers import QUICK, metrics, summary, train, train_command, train_env, train_here


@pytest.mark.slow
def test_one_process_records_its_options_and_checkpoints_its_last_step(trained_run):
    """conftest's ``trained_run``: 20 steps of bc.py as users run it (a process)."""
    assert json.loads((trained_run / "config.json").read_text())["config"]["optim"]["max_steps"] == 20
    assert open_checkpoint(trained_run).step == 20


@pytest.mark.slow
def test_more_steps_resume_where_the_run_stopped_and_keep_the_newest_3_checkpoints(pick_place_fleet, run_copy):
    """A run of 20 steps carried on to 40, in this process; its last line sums up what it trained."""
    resumed = train_here("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "40")
    assert resumed.returncode == 0 and "resumed from step 20" in resumed.stdout, resumed.stderr[-3000:]
    losses = [r["loss"] for r in metrics(run_copy) if "loss" in r]
    assert losses[-1] < 0.7 * losses[0], losses  # it learns, over the 40 steps that led to the checkpoint
    ended = summary(resumed)  # its last line: what it trained, how fast, how well, and where the checkpoint is
    validation = [(r["val_loss"], r["step"]) for r in metrics(run_copy) if "val_loss" in r]
    assert (ended["steps"], ended["to"], ended["checkpoint"]) == ("20", "40", str(run_copy / "checkpoints" / "last"))
    assert float(ended["seconds"]) > 0 and int(ended["samples"].replace(",", "")) > 0 and ended["images"] is None
    assert (float(ended["best"]), int(ended["best_step"])) == pytest.approx(min(validation), rel=1e-3)
    assert float(ended["last"]) == pytest.approx(validation[-1][0], rel=1e-3)
    steps = [r["step"] for r in metrics(run_copy) if "loss" in r]
    assert steps == sorted(steps) and steps[-1] == 40 and steps.count(20) == 1
    assert open_checkpoint(run_copy).step == 40
    assert sorted(p.name for p in (run_copy / "checkpoints").glob("step_*")) == \
        ["step_00000020", "step_00000030", "step_00000040"]  # the newest 3 are kept


@pytest.mark.slow
def test_a_resume_with_another_policy_head_is_refused_before_anything_is_written(pick_place_fleet, run_copy):
    other_head = train_here("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "30",
                            "--action-modes", "2")
    assert other_head.returncode == 2
    assert_one_line(other_head.stderr, "action_modes: 1 -> 2", "--no-resume")
    assert open_checkpoint(run_copy).step == 20


@pytest.mark.slow
def test_a_run_already_at_its_max_steps_has_nothing_to_do(pick_place_fleet, run_copy):
    records = metrics(run_copy)
    again = train_here("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "20")
    assert again.returncode == 0 and "nothing to do" in again.stdout and metrics(run_copy) == records


@pytest.mark.slow
def test_no_resume_starts_afresh_and_drops_the_abandoned_runs_later_steps(pick_place_fleet, run_copy):
    afresh = train_here("--data", pick_place_fleet, "--out", run_copy, "--max-steps", "10", "--no-resume")
    assert afresh.returncode == 0 and open_checkpoint(run_copy).step == 10, afresh.stderr[-3000:]
    assert sorted(p.name for p in (run_copy / "checkpoints").glob("step_*")) == ["step_00000010"]
    assert [r["step"] for r in metrics(run_copy)][-1] == 10


@pytest.mark.slow
def test_ctrl_c_keeps_the_last_checkpoint_says_so_in_one_line_and_a_rerun_resumes(pick_place_fleet, tmp_path):
    run = tmp_path / "run"
    process = subprocess.Popen(train_command("--data", pick_place_fleet, "--out", run, "--max-steps", "1000000"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=train_env(),
                               cwd=REPO, start_new_session=True, preexec_fn=default_sigint)
    deadline = time.monotonic() + 120
    while latest_checkpoint(run) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert interrupt(process) == 130, process.stderr.read()[-3000:]
    stderr = process.stderr.read()
    kept = latest_checkpoint(run)
    assert stderr.strip() == f"interrupted: {kept} is kept; rerun the same command to resume"
    assert not list((run / "checkpoints").glob(".*.tmp"))  # nothing half-written

    step = open_checkpoint(kept).step
    rerun = train_here("--data", pick_place_fleet, "--out", run, "--max-steps", str(step + 10))
    assert rerun.returncode == 0 and f"resumed from step {step}" in rerun.stdout
    assert open_checkpoint(run).step == step + 10


@pytest.mark.slow
def test_a_checkpoint_is_all_evaluation_needs(trained_run):
    policy, checkpoint = load_policy(trained_run)
    assert checkpoint.task["name"] == "pick_place" and checkpoint.features["action"]["shape"] == [5]
    assert set(checkpoint.stats) >= {"observation.state", "action"} and checkpoint.code_version
    spec = resolve_task("pick_place")
    env = spec.make_env(make_robot(0))
    observation, _ = env.reset(seed=1)
    policy.reset()
    actions = []
    for _ in range(10):  # 8 from the first chunk, then a new prediction
        actions.append(policy.select_action(observation))
        observation, *_ = env.step(actions[-1])
    assert np.stack(actions).shape == (10, 5) and np.isfinite(actions).all()


# Each step sees the same 64 windows: 1 rank x 64, 1 rank x 32 x 2 micro-steps, 2 ranks x 32. With horizon 1
# no action is padding, so every micro-batch loss is a plain mean and the three gradients are equal up to float
# rounding; after 4 Adam steps the weights agree to 1e-5 (the steps are ~3e-3). 4 steps x 64 stay inside the
# first epoch.
ONE_EPOCH_OF_EQUAL_STEPS = ["--max-steps", "4", "--val-fraction", "0", "--grad-clip", "0", "--horizon", "1",
                            "--n-action-steps", "1"]


@pytest.fixture(scope="module")
def two_rank_run(pick_place_fleet, tmp_path_factory):
    """torchrun with 2 ranks of batch 32 (ONE_EPOCH_OF_EQUAL_STEPS): the one torchrun job of this file. Read-only."""
    run = tmp_path_factory.mktemp("ddp") / "run"
    completed = train("--data", pick_place_fleet, "--out", run, *ONE_EPOCH_OF_EQUAL_STEPS, "--batch-size", "32",
                      ranks=2)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return run


@pytest.mark.slow
@pytest.mark.cluster
def test_two_torchrun_ranks_end_with_identical_weights(two_rank_run):
    config = json.loads((two_rank_run / "config.json").read_text())
    assert config["world_size"] == 2 and config["effective_batch"] == 64
    assert metrics(two_rank_run)[-1] == {"step": 4, "ranks_in_sync": True, "world_size": 2}
    # the default comm hook between CPU ranks on one host is our shared-memory one, and the saved config says so
    assert config["config"]["ddp"]["comm_hook"] == "shm"


@pytest.mark.parametrize("arguments, message", [
    (["--data", "/nonexistent"], "no fleet store"),
    (["--policy", "transformer"], "unknown policy"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--comm-hook", "zip"], "--comm-hook must be one of auto, none, shm, ring, fp16, bf16, powersgd, int8"),
    (["--amp", "fp16"], "--amp fp16 needs a GPU"),  # this machine has none
    (["--batch-size", "100000"], "is larger than this rank's"),
    (["--lr", "-1"], "--lr must be positive, got -1.0"),
    (["--grad-clip", "-0.5"], "--grad-clip must not be negative"),
    (["--hidden", "256", "0"], "--hidden widths must be at least 1, got 256 0"),
    (["--hidden"], "--hidden needs at least one width"),  # none would train a linear model
    (["--seed", "-1"], "--seed must not be negative, got -1"),
    (["--max-steps", "ten"], "error: argument --max-steps: invalid int value: 'ten' (see --help)"),
])
def test_bad_input_is_one_line_and_nonzero(pick_place_fleet, tmp_path, capsys, arguments, message):
    """bc.py's main in this process, as federated.py's and distill.py's bad input is tested; two of the cases
    also as users meet them (``test_bad_input_ends_the_script_with_one_line_and_code_2``)."""
    assert exit_code_of(bc_main, [*QUICK, "--data", pick_place_fleet, "--out", tmp_path / "run", *arguments]) == 2
    assert_one_line(capsys.readouterr().err, message)


@pytest.mark.slow
@pytest.mark.parametrize("arguments, message", [
    (["--max-steps", "ten"], "bc.py: error: argument --max-steps: invalid int value: 'ten' (see --help)"),
    (["--batch-size", "100000"], "is larger than this rank's"),  # after the store is read
])
def test_bad_input_ends_the_script_with_one_line_and_code_2(pick_place_fleet, tmp_path, arguments, message):
    completed = train("--data", pick_place_fleet, "--out", tmp_path / "run", *arguments)
    assert completed.returncode == 2 and message in completed.stderr
    assert completed.stderr.strip().count("\n") == 0


def final_weights(run) -> dict:
    return open_checkpoint(run).weights


@pytest.mark.slow
@pytest.mark.cluster
def test_accumulation_and_ranks_match_one_large_batch(pick_place_fleet, two_rank_run, tmp_path):
    """1 rank x 64, 1 rank x 32 x 2 micro-steps (both in this process) and ``two_rank_run``'s 2 ranks x 32 end
    with the same weights (see ONE_EPOCH_OF_EQUAL_STEPS)."""
    large, accumulated = tmp_path / "large", tmp_path / "accumulated"
    common = ["--data", pick_place_fleet, *ONE_EPOCH_OF_EQUAL_STEPS]
    assert train_here(*common, "--out", large, "--batch-size", "64").returncode == 0
    assert train_here(*common, "--out", accumulated, "--batch-size", "32", "--grad-accum", "2").returncode == 0
    assert json.loads((accumulated / "config.json").read_text())["effective_batch"] == 64
    expected = final_weights(large)
    for name, run in (("accumulated", accumulated), ("ranks", two_rank_run)):
        other = final_weights(run)
        for key, value in expected.items():
            np.testing.assert_allclose(other[key].numpy(), value.numpy(), atol=1e-5, err_msg=f"{name} {key}")


@pytest.mark.slow
def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_checkpoint(pick_place_fleet, tmp_path):
    run = tmp_path / "run"
    completed = train_here("--data", pick_place_fleet, "--out", run, "--max-steps", "50", "--lr", "1e30",
                           "--checkpoint-interval", "1", "--warmup-steps", "1")
    assert completed.returncode == 3, completed.stderr[-2000:]
    assert "not finite" in completed.stderr and completed.stderr.strip().count("\n") == 0
    checkpoint = open_checkpoint(latest_checkpoint(run))  # intact: it loads
    assert 1 <= checkpoint.step < 50


def test_the_learning_rate_scales_with_the_effective_batch():
    from train.schedule import scaled_learning_rate

    assert scaled_learning_rate(1e-3, "none", 1024, 256) == 1e-3
    assert scaled_learning_rate(1e-3, "linear", 1024, 256) == pytest.approx(4e-3)
    assert scaled_learning_rate(1e-3, "sqrt", 1024, 256) == pytest.approx(2e-3)
    assert scaled_learning_rate(1e-3, "linear", 64, 256) == pytest.approx(2.5e-4)


def test_an_extended_schedule_carries_on_from_where_it_stood_and_ends_at_a_tenth():
    from train.schedule import Schedule

    schedule = Schedule(warmup_steps=10, max_steps=100)
    before = [schedule(step) for step in range(60)]
    schedule.extend(50, 200)  # resumed at step 50 with --max-steps 200
    after = [schedule(step) for step in range(50, 201)]
    assert after[0] == pytest.approx(before[50]) and after[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(after, after[1:]))  # it only decays: no jump
    assert after[10] > before[59]  # slower than the old schedule would have


def test_a_warm_restart_starts_at_its_factor_and_decays_to_a_tenth_by_its_end():
    from train.schedule import Schedule

    schedule = Schedule(warmup_steps=10, max_steps=100)
    schedule.restart(100, 150, 0.5)  # fleet_learn.py --round-lr 0.5: a round of 50 steps after a finished run
    assert schedule(100) == pytest.approx(0.5)
    assert schedule(150) == pytest.approx(0.1) and schedule(125) == pytest.approx(0.3)


def test_adamw_takes_only_trained_weights_and_steps_like_torchs_default_loop():
    """The fused kernel ``adamw`` uses gives the per-tensor loop's weights, to float rounding, over 20 steps."""
    from train.schedule import adamw

    torch.manual_seed(0)
    fused_model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
    loop_model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
    loop_model.load_state_dict(fused_model.state_dict())
    for model in (fused_model, loop_model):
        model[0].bias.requires_grad_(False)  # a frozen weight stays out of the optimiser
    fused = adamw(fused_model.parameters(), lr=1e-2, weight_decay=1e-4)
    loop = torch.optim.AdamW([p for p in loop_model.parameters() if p.requires_grad], lr=1e-2, weight_decay=1e-4,
                             foreach=False)
    assert fused.defaults["fused"] and sum(len(g["params"]) for g in fused.param_groups) == 3

    for _ in range(20):
        inputs, targets = torch.randn(16, 12), torch.randn(16, 5)
        for model, optimizer in ((fused_model, fused), (loop_model, loop)):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(inputs), targets).backward()
            optimizer.step()
    for ours, reference in zip(fused_model.parameters(), loop_model.parameters()):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert torch.equal(fused_model[0].bias, loop_model[0].bias)


@pytest.mark.slow
def test_ema_weights_are_what_evaluation_loads_and_a_resume_restores_both(pick_place_fleet, tmp_path):
    """10 steps, then a resumed 11th, with an EMA of decay 0.9 and a checkpoint every step.

    The weights hold the average and load_policy returns it. After the resume, the step-11
    average is one EMA update of the restored step-10 average with the step-11 weights
    (a fresh average would equal those weights). The trained weights resumed are the trained
    ones, not the average: one step moves them far less than the ~10 steps the average lags.
    """
    run = tmp_path / "run"
    common = ["--data", pick_place_fleet, "--out", run, "--ema-decay", "0.9", "--checkpoint-interval", "1"]
    assert train_here(*common, "--max-steps", "10").returncode == 0
    resumed = train_here(*common, "--max-steps", "11")
    assert resumed.returncode == 0 and "resumed from step 10" in resumed.stdout
    before, after = (open_checkpoint(run / "checkpoints" / f"step_{step:08d}", training=True) for step in (10, 11))
    assert after.training["ema"]["updates"] == 11 and after.training["ema"]["decay"] == 0.9
    for key, average in after.weights.items():
        expected = 0.9 * before.weights[key] + 0.1 * after.training["ema"]["trained_model"][key]
        torch.testing.assert_close(average, expected, msg=key)

    def distance(a: dict, b: dict) -> float:
        return sum((a[key] - b[key]).norm().item() for key in a)

    trained_before, trained_after = before.training["ema"]["trained_model"], after.training["ema"]["trained_model"]
    assert distance(trained_after, trained_before) < 0.5 * distance(trained_after, before.weights)
    policy, _ = load_policy(run)
    for key, value in policy.state_dict().items():
        assert torch.equal(value, after.weights[key]), key
    assert not all(torch.equal(after.weights[k], trained_after[k]) for k in trained_after)


@pytest.mark.parametrize("command", ["train.bc", "train.federated"])
def test_help_lists_the_options(command, capsys):
    module = __import__(command, fromlist=["main"])
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0 and "--policy" in capsys.readouterr().out
