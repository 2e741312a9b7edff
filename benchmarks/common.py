"""What every benchmark shares: machine facts, the command line, the JSON result, the markdown table.

A benchmark's own job (its default inputs) is recorded: its JSON in benchmarks/results/ and
rows in benchmarks/README.md. A job on a user's run, checkpoint or data is only printed,
and ``--out FILE`` writes its JSON there: it writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from core.errors import check_output_directory
from core.files import code_version, write_json_atomic
from core.options import OneLineErrorParser
from sim.metaworld_tasks import FAMILY as METAWORLD

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
TABLES = BENCHMARKS / "README.md"
# Prefix for a command to run under the real-time FIFO scheduler: its threads then run the moment they
# are woken, instead of queueing behind other runnable threads (docs/training.md, Speed).
REALTIME = ["chrt", "--fifo", "1"]
# For every torchrun job: torchrun's restarts can hang with the shared rendezvous store.
TORCHRUN_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def machine_facts() -> dict:
    """Cores, CPU, library versions and device: enough to compare two result files."""
    import mujoco
    import torch

    return {
        "cores": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "mujoco": mujoco.__version__,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "code_version": code_version(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def realtime_permitted() -> bool:
    """Whether this user may start processes under ``REALTIME`` (root, CAP_SYS_NICE or an rtprio limit)."""
    return shutil.which("chrt") is not None and subprocess.run([*REALTIME, "true"], capture_output=True).returncode == 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def python_command(ranks: int = 1, torchrun: bool = False, realtime: bool = False) -> list[str]:
    """The start of a command that runs a Python script or module: under torchrun with ``ranks``
    processes when ``ranks > 1`` or ``torchrun`` (DDP with one rank), under ``REALTIME`` when ``realtime``."""
    command = [*(REALTIME if realtime else []), sys.executable]
    if ranks > 1 or torchrun:
        command += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    return command


def agent_command(ranks: int, name: str) -> list[str]:
    """The start of the command of each of ``ranks`` torchrun agents of one rank on this host, as on ``ranks``
    machines (``--nnodes``, c10d rendezvous on 127.0.0.1); start it ``ranks`` times."""
    port = free_port()
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={ranks}", "--nproc-per-node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={name}-{port}"]


def rate(step: Callable[[], object], seconds: float, warmup: int = 20, batch: int = 50) -> float:
    """Calls of ``step`` per second, timed for about ``seconds`` (at least ``batch`` calls) after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    calls, start = 0, time.perf_counter()
    while True:
        for _ in range(batch):
            step()
        calls += batch
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls / elapsed


def in_processes(loop: Callable[..., tuple[int, float]], parts: list[tuple]) -> tuple[int, float]:
    """(steps, seconds) of ``loop(*part)`` for every part at once, each in a spawned process of its own.

    Each loop times itself (spawn and imports excluded) and returns (steps, seconds); the slowest
    one counts. Even one part is spawned: once a process has rendered, the processes it forks can
    hang in their first render (EGL on llvmpipe), and the benchmark's own process may have rendered
    (collect's probe of the task does, with cameras).
    """
    with multiprocessing.get_context("spawn").Pool(len(parts)) as pool:
        results = pool.starmap(loop, parts)
    return sum(steps for steps, _ in results), max(seconds for _, seconds in results)


def bracketed(setup: Callable[[], float], limit: Callable[[int], tuple[int, float]]) -> tuple[float, float]:
    """(``setup()``'s rate, the limit's rate): ``limit(0)`` runs just before the setup and ``limit(1)`` just
    after, each half of the limit's work giving (steps, seconds), so a steady drift of the machine's
    speed cancels out of their ratio."""
    before = limit(0)
    rate = setup()
    after = limit(1)
    return rate, (before[0] + after[0]) / (before[1] + after[1])


def median_ratio(rounds: list[dict[str, float]], numerator: str, denominator: str, scale: float = 1.0) -> float:
    """``numerator / (scale x denominator)`` within each round (setups run back to back), then the median.

    A shared VM's speed drifts between minutes, so a ratio is only fair within one round.
    """
    return statistics.median(r[numerator] / (scale * r[denominator]) for r in rounds)


def family_name(benchmark: str, tasks: Iterable[str]) -> str:
    """The results file and table of ``benchmark`` run on ``tasks``: ``<benchmark>_metaworld`` for Meta-World's tasks
    and groups (``metaworld/...``), so that our own tasks' figures stay in ``<benchmark>``. A ``ValueError`` when
    the tasks mix the two."""
    families = {task.startswith(f"{METAWORLD}/") for task in tasks}
    if len(families) > 1:
        raise ValueError(f"{benchmark} measures Meta-World's tasks and ours in separate runs (their results go to "
                         f"{benchmark}_metaworld.json and {benchmark}.json)")
    return f"{benchmark}_{METAWORLD}" if True in families else benchmark


def write_results(name: str, result: dict, results_dir: Path = RESULTS) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def append_table_rows(name: str, header: list[str], rows: list[list], tables: Path = TABLES) -> None:
    """Append rows to the markdown table of benchmark ``name`` in benchmarks/README.md.

    The table lives between ``<!-- name:start -->`` and ``<!-- name:end -->``; it is
    created (with ``header``) at the end of the file the first time.
    """
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = tables.read_text() if tables.exists() else "# Benchmarks\n"
    if start not in text:
        rule = "|" + "|".join("---" for _ in header) + "|"
        text = text.rstrip("\n") + f"\n\n### {name}\n\n{start}\n| " + " | ".join(header) + f" |\n{rule}\n{end}\n"
    lines = "".join("| " + " | ".join(str(cell) for cell in row) + " |\n" for row in rows)
    tables.write_text(text.replace(end, lines + end))


def json_file(value: str) -> Path:
    """``--out``: a JSON file to write, where no file stands in for its directory (argparse's type)."""
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory; name the JSON file to write")
    try:
        check_output_directory(path.parent, "--out")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return path


class BenchmarkParser(OneLineErrorParser):
    """A benchmark's parser: its parsed arguments carry ``command``, the command line that gives them, for the
    result's provenance."""

    def __init__(self, module: str, **options) -> None:
        super().__init__(**options)
        self.module = module

    def parse_args(self, args=None, namespace=None):  # noqa: D102 (argparse's)
        argv = sys.argv[1:] if args is None else list(args)
        parsed = super().parse_args(argv, namespace)
        parsed.command = shlex.join(["python", "-m", self.module, *argv])
        return parsed


def benchmark_parser(description: str, module: str) -> argparse.ArgumentParser:
    """A parser for the benchmark ``module`` (``benchmarks.<name>``) with the options every benchmark shares:
    where results and tables go."""
    parser = BenchmarkParser(module, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", type=Path, default=RESULTS, help="where <name>.json is written")
    parser.add_argument("--tables", type=Path, default=TABLES, help="markdown file holding the tables")
    parser.add_argument("--out", type=json_file, help="write the JSON result to this file and nothing else "
                        "(no results file, no table rows)")
    return parser


def job_options(args: argparse.Namespace) -> dict:
    """The options of a benchmark's job, for its result: every option but where the result goes."""
    return {name: value for name, value in vars(args).items()
            if name not in ("results_dir", "tables", "out", "command")}


def default_job(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Whether ``args`` ask for the benchmark's own job: every job option at its default (then it is recorded)."""
    return job_options(args) == job_options(parser.parse_args([]))


def publish(name: str, result: dict, header: list[str], rows: list[list], args: argparse.Namespace,
            table: str | None = None, recorded: bool = True) -> Path | None:
    """Print the rows; write the JSON, with the command line that ran it, to ``--out`` if given, else, for a
    ``recorded`` job (the benchmark's own), to RESULTS/<name>.json with the rows appended to table ``table``
    (default ``name``). A job on a user's run or data (not ``recorded``) without ``--out`` writes nothing. Returns
    the JSON's path. The machine facts, code version and date are the result's own (``machine_facts``)."""
    result = {**result, "command": args.command}
    print(" | ".join(header[2:]))
    for row in rows:
        print(" | ".join(str(cell) for cell in row[2:]))  # without date and code version
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.out, result)
        path = args.out
    elif recorded:
        path = write_results(name, result, args.results_dir)
        append_table_rows(table or name, header, rows, args.tables)
    else:
        print("not recorded: this job is not the benchmark's own (--out FILE writes its JSON)")
        return None
    print(f"wrote {path}")
    return path
