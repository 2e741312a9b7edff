"""Dev and test splits: disjoint seeds and robots, and a ledger line for every test evaluation."""

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from collect import CollectConfig
from eval import EvalConfig, run_evaluation
from eval.cli import main as evaluate_main
from eval.ledger import entries, record
from eval.plan import held_out_seeds
from eval.split import TEST_SEED_BASE, check_robots, split_seed
from fault_helpers import assert_one_line, exit_code_of
from sim.fleet import SEED_STREAMS, TEST_ROBOTS, episode_seed


def test_a_dev_evaluation_never_draws_a_test_seed_and_the_reverse():
    """Over random fleets, robots and episode indices (the block included): every test seed lies above every
    32-bit seed of any other stream, so no dev, collection or rollout episode is ever a test episode."""
    rng = np.random.default_rng(0)
    for fleet_seed, robot, index in rng.integers(0, [2**31, 2 * TEST_ROBOTS, 10**6], size=(2000, 3)):
        test = split_seed("test", int(fleet_seed), int(robot), int(index))
        assert test >= TEST_SEED_BASE
        for stream in SEED_STREAMS:
            assert episode_seed(int(fleet_seed), int(robot), int(index), stream) < TEST_SEED_BASE
        assert split_seed("dev", int(fleet_seed), int(robot), int(index)) == episode_seed(
            int(fleet_seed), int(robot), int(index), "evaluate")  # dev is the stream evaluations always used
    assert held_out_seeds(3, 7, 4, split="test") == [split_seed("test", 3, 7, i) for i in range(4)]


def test_only_the_test_split_reaches_the_held_out_robots():
    check_robots("dev", 0, TEST_ROBOTS)  # robots 0..TEST_ROBOTS-1 are dev's
    check_robots("test", TEST_ROBOTS, 10)
    check_robots("test", 0, 10)  # test may also measure the training robots, on its own seeds
    for first, count in ((TEST_ROBOTS, 1), (TEST_ROBOTS - 5, 10)):
        with pytest.raises(ValueError, match="held-out block"):
            check_robots("dev", first, count)
    with pytest.raises(ValueError, match="--robots must be at most"):
        CollectConfig(robots=TEST_ROBOTS + 1)


def test_each_test_evaluation_adds_one_ledger_line_and_a_dev_one_none(tmp_path):
    ledger = tmp_path / "results" / "test_ledger.jsonl"
    common = dict(expert=True, task="reach", robots=1, episodes=2, workers=1, quiet=True, ledger=str(ledger))
    dev = run_evaluation(EvalConfig(**common, out=str(tmp_path / "dev")))
    assert not ledger.exists() and "test_evaluations" not in dev
    infos = [run_evaluation(EvalConfig(**common, out=str(tmp_path / f"test{i}"), split="test",
                                       robot_offset=TEST_ROBOTS)) for i in range(2)]
    lines = entries(ledger)
    assert len(lines) == 2 and [line["test_evaluations"] for line in lines] == [1, 2]
    assert [info["test_evaluations"] for info in infos] == [1, 2] and infos[0]["question"] == "expert on reach"
    assert lines[0]["robots"] == [TEST_ROBOTS] and lines[0]["config"]["split"] == "test"
    assert {"time", "code_version", "checkpoint_sha256", "store_manifest_sha256", "pc_success"} <= set(lines[0])
    seeds = {episode["seed"] for episode in infos[0]["per_episode"]}
    assert min(seeds) >= TEST_SEED_BASE and not seeds & {episode["seed"] for episode in dev["per_episode"]}
    assert json.loads((tmp_path / "test1" / "eval_info.json").read_text())["test_evaluations"] == 2


def test_concurrent_test_evaluations_each_add_exactly_one_line(tmp_path):
    """Each writer opens the ledger itself, as separate evaluate processes do: flock serialises the opens."""
    ledger = tmp_path / "ledger.jsonl"
    questions = ["q"] * 12 + ["other"] * 3
    with ThreadPoolExecutor(max_workers=6) as pool:
        counts = list(pool.map(lambda question: record(ledger, {"question": question}), questions))
    assert sorted(counts) == sorted([*range(1, 13), 1, 2, 3])
    assert len(entries(ledger)) == 15


def test_a_damaged_ledger_or_a_dev_question_is_refused_before_anything_runs(tmp_path, capsys):
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text('{"question": "q", "test_evaluations": 1}\n{"question": \n')
    arguments = ["--expert", "--task", "reach", "--robots", "1", "--episodes", "1", "--workers", "1", "--quiet",
                 "--out", str(tmp_path / "eval"), "--ledger", str(ledger)]
    assert exit_code_of(evaluate_main, [*arguments, "--split", "test"]) == 2
    assert_one_line(capsys.readouterr().err, "test ledger")
    assert exit_code_of(evaluate_main, [*arguments, "--question", "q"]) == 2
    assert_one_line(capsys.readouterr().err, "--question names what a test evaluation answers")
    assert exit_code_of(evaluate_main, [*arguments, "--robot-offset", str(TEST_ROBOTS)]) == 2
    assert_one_line(capsys.readouterr().err, "held-out block")
    assert not (tmp_path / "eval").exists()
