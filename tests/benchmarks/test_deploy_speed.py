"""benchmarks/deploy_speed.py runs every setup on a tiny job (figures are not asserted); a job that is not the
benchmark's own writes only where --out says; bad options are one line."""

import json

import pytest

from benchmarks import deploy_speed
from collect_helpers import git_status


@pytest.mark.slow
def test_a_tiny_job_measures_every_setup_and_writes_only_its_out_file(tmp_path):
    before = git_status()
    out = tmp_path / "speed" / "deploy.json"
    result = deploy_speed.main(["--task", "reach", "--robots", "2", "--episodes", "2", "--operators", "2",
                                "--image-size", "32", "--rounds", "1", "--out", str(out)])
    written = json.loads(out.read_text())
    assert written.pop("command").startswith("python -m benchmarks.deploy_speed --task reach --robots 2 ")
    assert written == result
    assert list(result["steps_per_s_best"]) == list(deploy_speed.SETUPS)
    assert all(rate > 0 for rate in result["steps_per_s_best"].values())
    assert len(result["steps_per_s_rounds"]) == 1
    assert set(result["ratios"]) == {"deploy_1w_vs_limit", "scaling_1w_to_2w", "deploy_2w_vs_limit_2proc",
                                     "machine_scaling_1proc_to_2proc"}
    assert all(ratio > 0 for ratio in result["ratios"].values())
    assert set(result["goals"]) == set(deploy_speed.GOALS)
    assert result["job"]["help_steps"] == deploy_speed.HELP_PER_EPISODE * 2 * 2
    assert 0 < result["expert_share"] < 1 and result["deploy_imports_s"] > 0 and result["cluster_start_stop_s"] > 0
    assert git_status() == before  # no results file, no table row


def test_only_the_default_job_is_recorded():
    args, own = deploy_speed.parse([])
    assert own and args.help_steps == deploy_speed.HELP_PER_EPISODE * args.robots * args.episodes
    assert not deploy_speed.parse(["--rounds", "1"])[1]
    assert not deploy_speed.parse(["--help-steps", str(args.help_steps)])[1]  # given, even at its default value


@pytest.mark.parametrize("options, message", [
    (["--episodes", "1"], "--episodes must be at least 2"),
    (["--operators", "1"], "--operators must be at least 2"),
    (["--robots", "2", "--operators", "3"], "at most --robots"),
    (["--help-steps", "-1"], "--help-steps must not be negative"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--gate", "psychic"], "invalid choice"),
])
def test_bad_options_are_one_line(options, message, capsys):
    with pytest.raises(SystemExit) as exited:
        deploy_speed.main(options)
    error = capsys.readouterr().err
    assert exited.value.code == 2 and error.count("\n") == 1 and message in error
