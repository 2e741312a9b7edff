"""The EVAL directory: checks before a run, and the files written when it ends.

    EVAL/eval_info.json   everything (see eval.report and eval.engine)
    EVAL/per_robot.csv    one row per robot (and the expert beside it, when compared)
    EVAL/success.png      per-robot success bars grouped by site, fleet mean as a line
    EVAL/success_tasks.png  with many tasks: per-task success with its 95% interval, by difficulty group
    EVAL/videos/*.mp4     with --videos

A run holds EVAL's lock throughout (``core.lock``: one evaluate writes an EVAL at a time) and
builds its output in a hidden staging directory beside EVAL (workers write the videos there),
renamed into place only once everything is written, so EVAL holds a whole evaluation or
nothing: an interrupted or failed run leaves no trace. A killed one (SIGKILL, a lost machine)
leaves its staging directory; the next run for the same EVAL, holding the lock, knows that no
other run is writing and removes them all.
"""

from __future__ import annotations

import csv
import glob
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import matplotlib

matplotlib.use("Agg")  # no display on workers and CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from core.errors import check_output_directory, warn  # noqa: E402
from core.files import write_json_atomic
from core.lock import output_lock
from eval.tasks import DIFFICULTIES, difficulty

EVAL_INFO = "eval_info.json"
SITE_COLOURS = {"office": "tab:orange", "warehouse": "tab:brown", "factory": "tab:blue"}
GROUP_COLOURS = dict(zip(DIFFICULTIES, ("tab:green", "tab:olive", "tab:orange", "tab:red")))


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse an EVAL that is (or lies under) a file, holds something else, or holds an evaluation (without
    --overwrite)."""
    check_output_directory(out)
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not (out / EVAL_INFO).exists():
        raise ValueError(f"--out {out} is not empty and holds no evaluation; refusing to write there")
    if not overwrite:
        raise ValueError(f"--out {out} already holds an evaluation; use --overwrite or another --out")


def _staging_prefix(out: Path) -> str:
    return f".{out.name}.staging-"


def clean_staging(out: Path) -> int:
    """Remove the staging directories that killed runs for ``out`` left beside it; how many. Only under
    ``out``'s lock, which says that no run is writing them; other outputs' ones stay."""
    stale = [d for d in out.parent.glob(glob.escape(_staging_prefix(out)) + "*") if d.is_dir()]
    for directory in stale:
        shutil.rmtree(directory, ignore_errors=True)
    return len(stale)


@contextmanager
def staging(out: Path, overwrite: bool) -> Iterator[Path]:
    """Hold ``out``'s lock, check it (``check_out``) and give a fresh directory beside it to build the output
    in; removed unless published. The ones killed runs left for ``out`` are removed first, with a warning."""
    with output_lock(out, "evaluate"):
        check_out(out, overwrite)
        try:
            if cleaned := clean_staging(out):
                warn(f"removed {cleaned} unfinished output(s) of killed evaluate runs beside --out {out}")
            directory = Path(tempfile.mkdtemp(dir=out.parent, prefix=_staging_prefix(out)))
        except OSError as error:
            raise ValueError(f"cannot write to --out {out}: {error.strerror}") from None
        try:
            yield directory
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def publish(directory: Path, out: Path) -> None:
    """Move a finished staging directory into place as ``out`` (replacing an earlier evaluation)."""
    directory.chmod(0o755)  # mkdtemp makes it private
    if out.is_dir():
        shutil.rmtree(out)  # check_out allowed it: an evaluation, with --overwrite
    directory.rename(out)


def write_outputs(directory: Path, info: dict) -> None:
    """eval_info.json, per_robot.csv, success.png (and success_tasks.png with many tasks) into ``directory``."""
    write_json_atomic(directory / EVAL_INFO, info)
    (directory / EVAL_INFO).chmod(0o644)  # the temporary file it was renamed from is private
    expert = {row["robot_id"]: row for row in info["expert"]["per_robot"]} if "expert" in info else None
    columns = ["robot_id", "site", "task", "n_episodes", "n_success", "pc_success", "ci95_low", "ci95_high", "n_errors"]
    with open(directory / "per_robot.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(columns + (["expert_pc_success"] if expert else []))
        for row in info["per_robot"]:
            values = [row[c] for c in columns[:6]] + row["ci95"] + [row["n_errors"]]
            writer.writerow(values + ([expert[row["robot_id"]]["pc_success"]] if expert else []))
    plot_success(info, directory / "success.png")
    if "per_group" in info:
        plot_task_success(info, directory / "success_tasks.png")


def plot_success(info: dict, path: Path) -> None:
    """Per-robot success bars grouped by site, a line for the fleet mean (and the expert's, when compared)."""
    sites = list(info["per_site"])
    rows = sorted(info["per_robot"], key=lambda row: (sites.index(row["site"]), row["robot_id"]))
    positions, x = [], 0.0
    for i, row in enumerate(rows):
        if i and row["site"] != rows[i - 1]["site"]:
            x += 1.0  # a gap between sites
        positions.append(x)
        x += 1.0
    figure, axes = plt.subplots(figsize=(max(6.0, 0.18 * len(rows) + 3), 3.6), dpi=120)
    centres = []
    for site in sites:
        xs = [p for p, row in zip(positions, rows) if row["site"] == site]
        axes.bar(xs, [row["pc_success"] for row in rows if row["site"] == site], width=0.8,
                 color=SITE_COLOURS.get(site, "tab:gray"))
        centres.append((xs[0] + xs[-1]) / 2)
    axes.axhline(info["fleet"]["pc_success"], color="black", linewidth=1.2,
                 label=f"fleet {info['fleet']['pc_success']:.1f}%")
    if "expert" in info:
        axes.axhline(info["expert"]["fleet"]["pc_success"], color="black", linestyle="--", linewidth=1.0,
                     label=f"expert {info['expert']['fleet']['pc_success']:.1f}%")
    axes.set_ylim(0, 105)
    axes.set_ylabel("success per robot (%)")
    axes.set_xticks(centres, [f"{site}\n{info['per_site'][site]['pc_success']:.1f}%" for site in sites])
    axes.set_title(f"{info['agent']} on {info['task']}: {len(rows)} robots, {info['fleet']['n_episodes']} episodes")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_task_success(info: dict, path: Path) -> None:
    """One row per task, easy to very_hard (``per_task``'s order): the success bar with its 95% interval, the
    expert's success as a mark beside it when compared, and each difficulty group's success in the labels."""
    tasks = list(info["per_task"])
    figures = [info["per_task"][task] for task in tasks]
    rows = range(len(tasks))
    figure, axes = plt.subplots(figsize=(7.5, 0.22 * len(tasks) + 1.6), dpi=120)
    successes = [f["pc_success"] for f in figures]
    whiskers = [[s - f["ci95"][0] for s, f in zip(successes, figures)],
                [f["ci95"][1] - s for s, f in zip(successes, figures)]]
    colours = [GROUP_COLOURS.get(difficulty(task), "tab:gray") for task in tasks]
    axes.barh(rows, successes, xerr=whiskers, color=colours, height=0.7, error_kw={"linewidth": 0.8})
    if "expert" in info:
        axes.plot([info["expert"]["per_task"][task]["pc_success"] for task in tasks], rows, "k|", markersize=9,
                  label="expert")
    handles = [Patch(color=colour, label=f"{group.split('/')[-1]} {info['per_group'][group]['pc_success']:.1f}%")
               for group, colour in GROUP_COLOURS.items() if group in info["per_group"]]
    axes.set_yticks(list(rows), [task.split("/")[-1] for task in tasks], fontsize=7)
    axes.set_ylim(len(tasks) - 0.4, -0.6)  # the first task on top, no margin beyond the bars
    axes.set_xlim(0, 105)
    axes.set_xlabel("success per task (%), 95% interval")
    axes.set_title(f"{info['agent']} on {info['task']}: {len(tasks)} tasks, {info['fleet']['n_episodes']} episodes",
                   fontsize=9)
    axes.legend(handles=axes.get_legend_handles_labels()[0] + handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
