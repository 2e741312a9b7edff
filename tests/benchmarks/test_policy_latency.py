"""benchmarks/policy_latency.py times every mlp size and a checkpoint file (figures are not asserted); a user's
checkpoint is measured without writing into the repository."""

import json
import subprocess
import sys

import pytest

from benchmarks import policy_latency
from collect_helpers import REPO, git_status, subprocess_env
from train.policies.policy import make_policy


def test_policy_latency_times_each_mlp_and_a_checkpoint(tmp_path, capsys):
    features = policy_latency.task_features(64)
    small = policy_latency.synthetic_checkpoint("mlp 64x64", features)
    small.training = {"optimizer": {}}  # more than the evaluation content, as a run's checkpoint
    checkpoint = small.write(tmp_path / "small")
    tables, out = tmp_path / "README.md", tmp_path / "latency.json"
    result = policy_latency.main(["--kinds", "mlp", "--checkpoint", str(checkpoint), "--repetitions", "20",
                                  "--tables", str(tables), "--out", str(out)])

    assert json.loads(out.read_text())["rows"] == result["rows"]
    rows = {row["case"]: row for row in result["rows"]}
    assert list(rows) == [str(checkpoint), "mlp 64x64", "mlp 256x256", "mlp 1024x1024x1024"]
    for case, row in rows.items():
        assert row["device"] == "cpu" and row["repetitions"] == 20 and set(row["ms"]) == {"select_action", "bare"}
        assert all(0 < ms["median"] <= ms["p99"] for ms in row["ms"].values())
        assert row["ratios"]["select_action_vs_bare"] > 0 and row["checkpoint_bytes"] > 0
        content = small if case == str(checkpoint) else policy_latency.synthetic_checkpoint(case, features)
        policy = make_policy(content.spec, content.stats)
        assert row["parameters"] == sum(p.numel() for p in policy.parameters())
    sizes = [rows[case]["parameters"] for case in ("mlp 64x64", "mlp 256x256", "mlp 1024x1024x1024")]
    assert sizes[0] < sizes[1] < sizes[2]  # the wide mlp has the most
    assert rows[str(checkpoint)]["file_bytes"] == sum(file.stat().st_size for file in checkpoint.iterdir())
    assert rows["mlp 64x64"]["file_bytes"] is None
    assert rows[str(checkpoint)]["parameters"] == rows["mlp 64x64"]["parameters"]
    assert "mlp 1024x1024x1024 | cpu, 1 thread |" in capsys.readouterr().out
    assert not tables.exists()  # a job on a user's checkpoint adds no rows to the benchmark's table


def latency(*arguments) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.policy_latency", *map(str, arguments)],
                          capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=600)


@pytest.mark.slow
def test_a_users_checkpoint_is_timed_without_writing_into_the_repository(trained_run, tmp_path):
    before = git_status()
    printed = latency("--checkpoint", trained_run, "--repetitions", 3)  # as docs/distillation.md shows it
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert f"{trained_run} | cpu, 1 thread |" in printed.stdout and "not recorded" in printed.stdout
    out = tmp_path / "latency" / "run.json"
    written = latency("--checkpoint", trained_run, "--repetitions", 3, "--out", out)
    assert written.returncode == 0 and f"wrote {out}" in written.stdout, written.stderr[-2000:]
    assert [row["case"] for row in json.loads(out.read_text())["rows"]] == [str(trained_run)]
    refused = latency("--checkpoint", trained_run, "--out", tmp_path)  # a directory, not a file
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "is a directory" in refused.stderr
    assert git_status() == before
