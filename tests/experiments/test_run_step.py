"""experiments.common.run_step: a stage's output lands in its log, in a folder made for it, and a failed stage
ends the experiment naming that log."""

import sys

import pytest

from core.errors import Failure
from experiments.common import run_step


def test_a_stage_logs_into_a_new_folder_and_a_failure_names_its_log(tmp_path):
    log = tmp_path / "not" / "yet" / "stage.log"
    run_step("say hello", [sys.executable, "-c", "print('hello')"], log)
    assert log.read_text() == "hello\n"
    with pytest.raises(Failure) as failure:
        run_step("fail", [sys.executable, "-c", "import sys; print('no'); sys.exit(3)"], log)
    assert (failure.value.message, failure.value.code) == (f"fail failed (exit 3); its output is in {log}", 1)
    assert log.read_text() == "no\n"
