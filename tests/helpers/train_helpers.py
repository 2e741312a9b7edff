"""Running ``train/bc.py`` as users do: one process, or ranks under torchrun."""

import json
import re
import subprocess
import sys

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
