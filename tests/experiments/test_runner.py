"""experiments/runner.py: a declaration runs its stages as users would, resumes without redoing a finished stage,
reruns from the first changed one, and writes a results file that fails its check once edited by hand; a bad
declaration is refused in one line before anything runs."""

import json
import subprocess
import sys
import tomllib

import pytest

from collect_helpers import REPO, subprocess_env
from core.errors import Failure
from experiments import runner
from experiments.results_file import check_results, payload_sha256
from fault_helpers import assert_one_line

SMOKE = REPO / "experiments" / "declarations" / "reach_smoke.toml"


def run(declaration, tmp_path):
    """Run ``declaration`` into tmp_path/work, its results and ledger beside it."""
    runner.main(["run", str(declaration), "--work", str(tmp_path / "work"), "--results", str(tmp_path / "results.json"),
                 "--ledger", str(tmp_path / "ledger.jsonl")])


def records(tmp_path) -> dict[str, str]:
    return {path.stem: path.read_text() for path in sorted((tmp_path / "work" / "records").glob("*.json"))}


def ledger_lines(tmp_path) -> int:
    return len((tmp_path / "ledger.jsonl").read_text().splitlines())


def declaration_text(**stage_options) -> str:
    """The smoke declaration as TOML, with ``stage_options`` (stage name -> options) merged into its stages'."""
    table = tomllib.loads(SMOKE.read_text())
    lines = [f"{key} = {json.dumps(table[key])}" for key in ("name", "question", "claim")]
    for stage in table["stage"]:
        options = {**stage["options"], **stage_options.get(stage["name"], {})}
        lines += ["[[stage]]", f"name = {json.dumps(stage['name'])}", f"kind = {json.dumps(stage['kind'])}",
                  f"processes = {stage.get('processes', 1)}", "[stage.options]", *(f"{key} = {json.dumps(value)}" for key, value in options.items())]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_a_declaration_runs_resumes_and_reruns_from_its_first_changed_stage(tmp_path, capsys):
    run(SMOKE, tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    check_results(tmp_path / "results.json")
    reported = results["results"]["test"]
    assert reported["split"] == "test" and reported["n_episodes"] == 2
    assert sum(site["n_episodes"] for site in reported["per_site"].values()) == 2
    assert reported["expert"]["n_episodes"] == 2  # the expert beside, on the same episodes
    evaluation = results["provenance"]["evaluations"]["test"]
    assert len(evaluation["checkpoint_sha256"]) == len(evaluation["store_manifest_sha256"]) == 64
    assert list(results["provenance"]["commands"]) == ["collect", "train", "test"]
    assert results["provenance"]["commands"]["train"].startswith(
        "torchrun --standalone --nproc_per_node=2 train/bc.py --data ")
    assert "world_size 2" in (tmp_path / "work" / "logs" / "train.log").read_text()
    assert all((tmp_path / "work" / "logs" / f"{stage}.log").exists() for stage in ("collect", "train", "test"))
    assert ledger_lines(tmp_path) == 1
    first = records(tmp_path)

    run(SMOKE, tmp_path)  # nothing changed: no stage runs again, no test evaluation is counted again
    again = records(tmp_path)
    assert {stage: again[stage] for stage in ("collect", "train", "test")} == \
        {stage: first[stage] for stage in ("collect", "train", "test")}
    assert ledger_lines(tmp_path) == 1
    assert "collect: finished before, skipped" in capsys.readouterr().out

    changed = tmp_path / "changed.toml"
    changed.write_text(declaration_text(test={"episodes": 1}))
    run(changed, tmp_path)
    last = records(tmp_path)
    assert last["collect"] == first["collect"] and last["train"] == first["train"]
    assert last["test"] != first["test"] and ledger_lines(tmp_path) == 2
    assert json.loads((tmp_path / "results.json").read_text())["results"]["test"]["n_episodes"] == 1


def sealed(results: dict) -> dict:
    return {**results, "payload_sha256": payload_sha256(results)}


def test_a_results_file_changed_by_hand_fails_its_check(tmp_path):
    path = tmp_path / "results.json"
    results = sealed({"results": {"test": {"pc_success": 84.0}}, "provenance": {"commands": {}}})
    path.write_text(json.dumps(results, indent=2))
    check_results(path)
    path.write_text(json.dumps({**results, "results": {"test": {"pc_success": 96.0}}}, indent=2))
    with pytest.raises(ValueError, match="does not match its payload_sha256") as error:
        check_results(path)
    assert "\n" not in str(error.value)
    completed = subprocess.run([sys.executable, "-m", "experiments.runner", "check", str(path)], capture_output=True,
                               text=True, env=subprocess_env(), cwd=REPO)
    assert completed.returncode == 1
    assert_one_line(completed.stderr, "does not match its payload_sha256")


REFUSED = {
    "an unknown stage kind": ("[[stage]]\nname = 'x'\nkind = 'deploy'\n", "has kind 'deploy'"),
    "an unknown option": ("[[stage]]\nname = 'c'\nkind = 'collect'\noptions = { robotz = 2 }\n",
                          "collect has no option 'robotz'"),
    "an unknown stage key": ("[[stage]]\nname = 'c'\nkind = 'collect'\nseed = 1\n", "unknown key 'seed'"),
    "an unknown top-level key": ("owner = 'me'\n", "unknown key 'owner'"),
    "a placeholder naming no earlier stage": (
        "[[stage]]\nname = 't'\nkind = 'train'\noptions = { data = '{collect}' }\n", "{collect}, which is no earlier"),
    "an evaluate stage without a split": (
        "[[stage]]\nname = 'e'\nkind = 'evaluate'\noptions = { expert = true, task = 'reach' }\n",
        "must declare split"),
    "processes on a stage that is not training": (
        "[[stage]]\nname = 'c'\nkind = 'collect'\nprocesses = 2\n", "only a train stage runs under torchrun"),
    "processes that are not a whole number": (
        "[[stage]]\nname = 't'\nkind = 'train'\nprocesses = 1.5\n", "it is a whole number, at least 1"),
    "two stages of one name": ("[[stage]]\nname = 'c'\nkind = 'collect'\n" * 2, "two stages are named c"),
    "a compare that reads a dev evaluation": (
        "[[stage]]\nname = 'dev'\nkind = 'evaluate'\noptions = { expert = true, task = 'reach', split = 'dev' }\n"
        "[[stage]]\nname = 'compare'\nkind = 'compare'\noptions = { evaluations = ['dev'] }\n",
        "reads dev, a dev evaluation"),
}
HEADER = "name = 'bad'\nquestion = 'q'\nclaim = 'c'\n"


@pytest.mark.parametrize("case", REFUSED)
def test_a_bad_declaration_is_refused_in_one_line_before_anything_runs(case, tmp_path, capsys):
    stages, message = REFUSED[case]
    declaration = tmp_path / "bad.toml"
    declaration.write_text(HEADER + stages)
    with pytest.raises(Failure) as failure:
        run(declaration, tmp_path)
    assert failure.value.code == 2
    assert_one_line(capsys.readouterr().err, message)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bad.toml"]


def test_the_command_line_refuses_a_bad_declaration_with_exit_2(tmp_path):
    declaration = tmp_path / "bad.toml"
    declaration.write_text(HEADER + REFUSED["an unknown stage kind"][0])
    completed = subprocess.run([sys.executable, "-m", "experiments.runner", "run", str(declaration), "--work",
                                str(tmp_path / "work")], capture_output=True, text=True, env=subprocess_env(), cwd=REPO)
    assert completed.returncode == 2
    assert_one_line(completed.stderr, "has kind 'deploy'")
    assert not (tmp_path / "work").exists()


@pytest.mark.slow
def test_a_failing_stage_stops_the_run_naming_its_log_and_runs_again_next_time(tmp_path, capsys):
    declaration = tmp_path / "failing.toml"
    declaration.write_text(HEADER + "[[stage]]\nname = 'c'\nkind = 'collect'\noptions = { task = 'no_such_task' }\n"
                                    "[[stage]]\nname = 't'\nkind = 'train'\noptions = { data = '{c}' }\n")
    log = tmp_path / "work" / "logs" / "c.log"
    for _ in range(2):  # a failed stage is not finished: the rerun runs it again
        with pytest.raises(Failure) as failure:
            run(declaration, tmp_path)
        assert failure.value.code == 1
        assert_one_line(capsys.readouterr().err, f"stage c failed (exit 2); its output is in {log}")
        assert "no_such_task" in log.read_text()
        assert json.loads(records(tmp_path)["c"])["returncode"] == 2 and "t" not in records(tmp_path)
