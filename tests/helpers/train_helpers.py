"""Running ``train/bc.py`` as users do: one process, or ranks under torchrun."""

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

from collect_helpers import REPO, subprocess_env

QUICK = ["--batch-size", "32", "--log-interval", "5", "--val-interval", "10", "--checkpoint-interval", "10",
         "--warmup-steps", "5", "--hidden", "64", "64", "--lr", "3e-3"]


def train_command(*arguments, ranks: int = 1, launcher_options: tuple[str, ...] = (), script: str = "bc.py"
                  ) -> list[str]:
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", *launcher_options]
    return [*launcher, str(REPO / "train" / script), *QUICK, *map(str, arguments)]


def train_env() -> dict:
    """The environment of a training process: torchrun's agent serves the store at a port it holds from the
    start, so jobs that run at once never race for one (train/bc.py's ``attempt_store``)."""
    env = subprocess_env()
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    return env


def train(*arguments, ranks: int = 1, script: str = "bc.py") -> subprocess.CompletedProcess:
    """``train/SCRIPT`` (bc.py, distill.py) with ``QUICK``'s settings and ``arguments``, run to the end."""
    return subprocess.run(train_command(*arguments, ranks=ranks, script=script), capture_output=True, text=True,
                          env=train_env(), cwd=REPO, timeout=600)


def train_here(*arguments) -> subprocess.CompletedProcess:
    """``train/bc.py``'s ``main`` in this process with ``QUICK``'s settings: what ``train`` returns, without
    starting a process (the engine's behaviour, such as a resume or a refusal, needs no process boundary)."""
    from train.bc import main  # here: the helpers that only start processes never import torch

    argv = [*QUICK, *map(str, arguments)]
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        try:
            main(argv)
            code = 0
        except SystemExit as exit_info:
            code = exit_info.code
    return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


SUMMARY = re.compile(r"done: (?P<steps>\d+) steps(?: \(from step \d+ to (?P<to>\d+)\))? in (?P<seconds>[\d.]+) s "
                     r"\((?P<samples>[\d,]+) samples/s(?:, (?P<images>[\d,]+) images/s)?\); "
                     r"(?:validation loss best (?P<best>\S+) \(step (?P<best_step>\d+)\), last (?P<last>\S+)"
                     r"|no validation loss \(no episodes held out\)); checkpoint (?P<checkpoint>.+)")


def summary(completed: subprocess.CompletedProcess) -> dict[str, str | None]:
    """The fields of the summary line a run of bc.py ends its output with."""
    match = SUMMARY.fullmatch(completed.stdout.strip().splitlines()[-1])
    assert match, completed.stdout[-2000:]
    return match.groupdict()
