"""Federated training: FedAvg arithmetic, deterministic clients, personal heads, resuming a killed run."""

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from collect_helpers import REPO, subprocess_env
from dataset import FleetStore
from dataset.stats import fleet_stats
from federated_helpers import QUICK, configure, metrics
from train.checkpoint import checkpoint_dir, latest_checkpoint, load_policy, open_checkpoint
from train.fed.fedavg import ClientUpdate, flatten, train_client, weighted_average
from train.fed.federated_config import FederatedConfig
from train.fed.rounds import RoundResult, sample_clients
from train.federated import FLEET_HEAD, Server, main, run_federated
from train.policies.policy import policy_spec


def server_for(config: FederatedConfig) -> Server:
    store = FleetStore.open(config.data)
    return Server(config, store, policy_spec(config, store.features), fleet_stats(store), store.robots)


def test_the_average_is_weighted_by_sample_count_and_identical_vectors_average_to_themselves():
    a, b, c = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(weighted_average([a, b, c], [1, 3, 6]), (a + 3 * b + 6 * c) / 10)
    assert torch.equal(weighted_average([a, a, a], [5, 1, 7]), a)


def test_clients_are_sampled_reproducibly_without_repeats():
    robots = list(range(10))
    first = sample_clients(robots, 0.3, seed=0, round_index=4, attempt=0)
    assert first == sample_clients(robots, 0.3, seed=0, round_index=4, attempt=0)
    assert len(first) == len(set(first)) == 3 and first == sorted(first)
    assert len({tuple(sample_clients(robots, 0.3, 0, r, 0)) for r in range(1, 11)}) > 1  # rounds differ
    assert sample_clients(robots, 0.01, 0, 1, 0) != [] and sample_clients([7], 1.0, 0, 1, 0) == [7]


def test_fedavg_of_identical_clients_is_that_client(pick_place_fleet, tmp_path):
    server = server_for(configure(pick_place_fleet, tmp_path / "run", "--local-epochs", "2"))
    job, weights = server.job(1, round_index=1), server.weights.numpy()
    first, second = train_client(job, weights), train_client(job, weights)
    assert first.steps > 0 and first.samples > 0
    assert (first.payload["values"] == second.payload["values"]).all()  # a client is deterministic
    expected = server.weights + torch.from_numpy(first.payload["values"])  # the client's weights
    server.apply([first, second, first])
    assert torch.equal(server.weights, expected)


def test_a_client_trains_on_the_threads_the_server_gives_it(pick_place_fleet, tmp_path):
    server = server_for(configure(pick_place_fleet, tmp_path / "run"))
    server.client_threads = 1  # run_federated sets the local cluster's share of the cores (train/threads.py)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        train_client(server.job(1, round_index=1), server.weights.numpy())
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_server_momentum_steps_along_the_running_sum_of_mean_deltas(pick_place_fleet, tmp_path):
    server = server_for(configure(pick_place_fleet, tmp_path / "run", "--server-momentum", "0.5",
                                  "--server-lr", "0.1"))
    start = server.weights.clone()
    deltas = torch.randn(2, start.numel(), generator=torch.Generator().manual_seed(0))
    for delta in deltas:
        server.apply([ClientUpdate(0, 1, 0.0, 1, {"method": "none", "values": delta.numpy()}, None, None, 0.0)])
    # velocity 1 = d1, velocity 2 = 0.5 d1 + d2; the weights moved by 0.1 x (d1 + 0.5 d1 + d2)
    torch.testing.assert_close(server.weights, start + 0.1 * (1.5 * deltas[0] + deltas[1]))
    restored = server_for(server.config)
    restored.restore(server.checkpoint())
    assert torch.equal(restored.velocity[None], server.velocity[None])


def test_heads_take_the_server_step_too(pick_place_fleet, tmp_path):
    server = server_for(configure(pick_place_fleet, tmp_path / "run", "--personal", "site", "--server-lr", "0.5"))
    key = server.head_keys[0]
    start = server.head_of(0)[key].clone()
    trained = {name: torch.full_like(server.template[name], 2.0) for name in server.head_keys}
    zero_delta = {"method": "none", "values": torch.zeros_like(server.weights).numpy()}
    server.apply([ClientUpdate(0, 1, 0.0, 1, zero_delta, trained, None, 0.0)])
    torch.testing.assert_close(server.head_of(0)[key], start + 0.5 * (2.0 - start))  # half way to what it trained


def test_site_heads_are_the_sample_weighted_mean_of_the_site_and_robots_keep_their_site_head(pick_place_fleet,
                                                                                            tmp_path):
    server = server_for(configure(pick_place_fleet, tmp_path / "run", "--personal", "site"))
    server.group_of = lambda robot: "office" if robot in (0, 2) else "warehouse"  # two robots share a site
    heads = {robot: {key: torch.full_like(server.template[key], float(robot)) for key in server.head_keys}
             for robot in (0, 1, 2)}
    zero_delta = {"method": "none", "values": torch.zeros_like(server.weights).numpy()}
    server.apply([ClientUpdate(robot, samples, 0.0, 1, zero_delta, heads[robot], None, 0.0)
                  for robot, samples in ((0, 1), (1, 5), (2, 3))])
    office = server.heads["office"][server.head_keys[0]]
    assert torch.equal(office, torch.full_like(office, (0 * 1 + 2 * 3) / 4))
    personal = server.checkpoint().personal
    assert all(torch.equal(personal[0][key], personal[2][key]) for key in server.head_keys)
    assert torch.equal(personal[1][server.head_keys[0]], heads[1][server.head_keys[0]])


def test_with_personal_after_the_fleet_shares_one_head_then_each_site_starts_from_it(pick_place_fleet, tmp_path):
    server = server_for(configure(pick_place_fleet, tmp_path / "run", "--personal", "site", "--personal-after", "1"))
    key, zero_delta = server.head_keys[0], {"method": "none", "values": torch.zeros_like(server.weights).numpy()}

    def trained(robot: int) -> ClientUpdate:
        head = {name: torch.full_like(server.template[name], float(robot + 1)) for name in server.head_keys}
        return ClientUpdate(robot, 1, 0.0, 1, zero_delta, head, None, 0.0)

    assert {server.group_of(robot) for robot in server.robots} == {FLEET_HEAD}
    server.apply([trained(0), trained(1), trained(2)])  # round 1: one head, the mean of every robot's
    assert list(server.heads) == [FLEET_HEAD]
    assert torch.equal(server.heads[FLEET_HEAD][key], torch.full_like(server.template[key], 2.0))
    assert server.traffic([server.job(0, 1)], RoundResult([trained(0)], {}, []))["state_bytes"] == 0  # it travels
    server.round = 1
    sites = {server.group_of(robot) for robot in server.robots}
    assert sites == {server.store.site_of(robot) for robot in server.robots} and FLEET_HEAD not in sites
    assert all(torch.equal(server.head_of(robot)[key], server.heads[FLEET_HEAD][key]) for robot in server.robots)
    server.apply([trained(0)])  # round 2: robot 0's site gets a head of its own, the others still get the fleet's
    site = server.group_of(0)
    assert torch.equal(server.heads[site][key], torch.full_like(server.template[key], 1.0))
    others = [robot for robot in server.robots if server.group_of(robot) != site]
    assert all(torch.equal(server.head_of(robot)[key], server.heads[site][key]) for robot in others)  # the fallback
    assert set(server.checkpoint().personal) == {robot for robot in server.robots if server.group_of(robot) == site}


@pytest.mark.slow
def test_personal_heads_stay_local_and_equal_what_each_robot_trained(pick_place_fleet, module_scheduler, tmp_path):
    config = configure(pick_place_fleet, tmp_path / "run", "--rounds", "2", "--local-epochs", "2",
                       "--personal", "robot", "--compression", "int8", "--scheduler", module_scheduler)
    run_federated(config)
    final = open_checkpoint(config.out)
    robots = sorted(final.personal)
    assert robots == [0, 1, 2] and final.step == 2

    states = {robot: load_policy(config.out, robot)[0].state_dict() for robot in robots}
    head_keys = sorted(final.personal[0])
    assert head_keys == ["net.4.bias", "net.4.weight"]
    for key in states[0]:
        same = all(torch.equal(states[0][key], states[robot][key]) for robot in robots)
        assert same == (key not in head_keys), key  # one shared body, a head of its own per robot

    # Round 2 again, here: each robot's head is exactly what its client trained, and the
    # shared weights are exactly round 1's plus the sample-weighted mean of the deltas.
    server = server_for(config)
    server.restore(open_checkpoint(checkpoint_dir(config.out) / "step_00000001", training=True))
    updates = [train_client(server.job(robot, round_index=2), server.weights.numpy()) for robot in robots]
    for update in updates:
        assert all(torch.equal(final.personal[update.robot_id][key], update.head[key]) for key in head_keys)
    server.apply(updates)
    assert torch.equal(flatten(final.weights, server.keys), server.weights)
    records = metrics(config.out)
    assert [r["round"] for r in records] == [1, 2] and all(r["completed"] == [0, 1, 2] for r in records)
    assert all(0 < r["bytes_up"] < r["bytes_down"] / 3 for r in records)  # int8 deltas up, float32 weights down


@pytest.mark.slow
def test_head_epochs_fit_each_head_to_the_final_shared_weights_and_leave_those_alone(pick_place_fleet,
                                                                                    module_scheduler, tmp_path):
    arguments = ("--rounds", "2", "--personal", "robot", "--compression", "int8", "--scheduler", module_scheduler)
    plain = configure(pick_place_fleet, tmp_path / "plain", *arguments)
    fitted = configure(pick_place_fleet, tmp_path / "fitted", *arguments, "--head-epochs", "3")
    run_federated(plain)
    run_federated(fitted)
    before, after = (open_checkpoint(run.out, training=True) for run in (plain, fitted))
    assert after.step == 2 and after.training["federated"]["heads_fitted"]
    assert not before.training["federated"]["heads_fitted"]
    assert all(torch.equal(after.weights[key], before.weights[key])  # the rounds are the same; the fit
               for key in before.weights if key not in after.personal[0])  # leaves the shared weights alone

    # Each head is exactly what its robot fitted, starting from its round-2 head, on the final weights.
    server = server_for(fitted)
    server.restore(before)
    for robot in server.robots:
        job = replace(server.job(robot, round_index=2), fit_head_only=True, lr_factor=1.0)
        update = train_client(job, server.weights.numpy())
        assert update.steps > 0 and update.payload == {}
        head = after.personal[robot]
        assert all(torch.equal(head[key], update.head[key]) for key in head)
        assert not all(torch.equal(head[key], before.personal[robot][key]) for key in head)
    [*_, fit] = metrics(fitted.out)
    assert fit["head_fit"] and fit["completed"] == [0, 1, 2] and fit["bytes_up"] == 0  # robot heads stay on board

    run_federated(fitted)  # rerun: nothing left to do, the fit is not repeated
    assert len(metrics(fitted.out)) == 3


def federated(*arguments) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "train" / "federated.py"), *QUICK, *map(str, arguments)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO,
                            start_new_session=True)


@pytest.mark.slow
def test_a_killed_run_resumes_and_ends_where_an_uninterrupted_one_does(pick_place_fleet, tmp_path):
    arguments = ["--data", pick_place_fleet, "--rounds", "4", "--local-epochs", "2", "--fraction", "0.67",
                 "--compression", "topk", "--topk-fraction", "0.05", "--personal", "robot"]
    reference = federated(*arguments, "--out", tmp_path / "reference")

    run = tmp_path / "run"
    process = federated(*arguments, "--out", run)
    deadline = time.monotonic() + 300
    while (latest_checkpoint(run) or Path("none")).name < "step_00000002":
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)  # the trainer and its dask workers, mid-run
    process.wait()
    killed_at = open_checkpoint(run).step
    assert 2 <= killed_at < 4

    resumed = federated(*arguments, "--out", run)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    assert reference.wait(timeout=300) == 0, reference.stderr.read()
    records = metrics(run)
    assert [r["round"] for r in records] == list(range(1, 5))  # no round lost, none twice

    mine, theirs = (open_checkpoint(path, training=True) for path in (run, tmp_path / "reference"))
    assert mine.step == theirs.step == 4
    assert all(torch.equal(mine.weights[key], theirs.weights[key]) for key in theirs.weights)
    ours, reference_state = mine.training["federated"], theirs.training["federated"]
    for name in ("heads", "residuals"):
        assert ours[name].keys() == reference_state[name].keys() and ours[name]
    assert all(torch.equal(ours["residuals"][r], reference_state["residuals"][r]) for r in reference_state["residuals"])
    assert all(torch.equal(ours["heads"][r][key], value)
               for r, head in reference_state["heads"].items() for key, value in head.items())
    assert ours["bytes_up"] == reference_state["bytes_up"]


@pytest.mark.parametrize("arguments, message", [
    (["--data", "/nonexistent"], "no fleet store"),
    (["--fraction", "0"], "--fraction must be in (0, 1]"),
    (["--personal", "desk"], "--personal must be one of none, robot, site"),
    (["--personal-after", "1"], "--personal-after 1 needs --personal robot or site"),
    (["--head-epochs", "2"], "--head-epochs fits personal heads: it needs --personal robot or site"),
    (["--weight-decay", "-0.1"], "--weight-decay must not be negative, got -0.1"),
])
def test_bad_input_is_one_line_and_nonzero(pick_place_fleet, tmp_path, capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["--data", str(pick_place_fleet), "--out", str(tmp_path / "run"), *QUICK, *arguments])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1
    assert not (tmp_path / "run").exists()
