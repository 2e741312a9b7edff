"""collect_speed with cameras finishes: no setup hangs once the benchmark's own process has rendered."""

import json
import os
import signal
import subprocess
import sys

import pytest

SETUPS = {"limit", "limit_2proc", "collect_1w", "collect_2w", "vector_2env", "write_crc32c", "write_no_checksum"}
# 30 to 60 s on the 2-core VM; a setup that hangs (AsyncVectorEnv's workers forked after rendering did) fails here.
TIMEOUT_S = 240


@pytest.mark.slow
def test_the_camera_case_finishes_and_reports_every_setup(tmp_path):
    out = tmp_path / "collect_speed_cameras.json"
    command = [sys.executable, "-m", "benchmarks.collect_speed", "--robots", "2", "--episodes", "1", "--rounds", "1",
               "--task", "reach", "--cameras", "front", "wrist", "--image-size", "32", "--out", str(out)]
    # Its own session, so that a hang is ended with every process it started (workers, the cluster).
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"collect_speed with cameras did not finish in {TIMEOUT_S} s")
    assert process.returncode == 0, stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["job"]["cameras"] == ["front", "wrist"] and result["job"]["image_size"] == 32
    assert set(result["steps_per_s_best"]) == SETUPS
    assert all(rate > 0 for rate in result["steps_per_s_best"].values())
    assert all(value > 0 for value in result["ratios"].values())
    assert set(result["collect_1w_lost"]) == {"lost", "writing", "outside_tasks", "rest"}
    assert f"wrote {out}" in stdout
