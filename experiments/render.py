"""Render the docs' experiment sections from their results files, or check that the docs are up to date.

    python -m experiments.render            # rewrite every section from its results file
    python -m experiments.render --check    # write nothing; name each stale section, exit 1 if any

A section is the text between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` in a doc. ``SECTIONS`` maps each
to its doc, its heading, its results file and the function of that file's content that renders it: the function
the experiment script calls when it finishes (``write``), so a section is written one way. The speed figures of
the README, docs/performance.md and docs/sim.md render from benchmarks/results/ (``benchmarks.figures``), the rest from
experiments/results/.
A recorded run's page, experiments/runs/NAME.md, is a section of its own (render creates a missing page): each
fleet-learning run's (results ``fleet_learning*``) and each ROHE sweep's; experiments/runs/README.md lists the
fleet-learning runs, a section rendered from all their results files.
A results file that carries a ``payload_sha256`` must match it; older files have none and are read as they are.
"""

from __future__ import annotations

import argparse
import importlib
import json
from dataclasses import dataclass
from pathlib import Path

from core.errors import fail
from core.files import REPO
from core.options import OneLineErrorParser
from experiments.common import doc_link, markers, replaced_section, write_section
from experiments.results_file import DIGEST, check_results

RESULTS = "experiments/results"
BENCHMARK_RESULTS = "benchmarks/results"
RUNS = "experiments/runs"
MEDIA = "docs/media"  # where the experiments' plots go (their --media)


@dataclass(frozen=True)
class Section:
    """A rendered section: its ``name`` (markers), ``doc`` and ``heading`` (under which an experiment's first
    run appends it), its ``results`` file's name and ``render`` (``module:function`` of the results' content);
    ``inline`` for a span inside a line (README's figures); ``folder``, where the results file lies; ``many``: the
    results name is a glob, and ``render`` takes every matching file's content by name. ``renders`` is
    False where the committed results file predates the format its script renders (its next run rewrites both):
    ``render`` leaves it as it is."""
    name: str
    doc: str
    heading: str
    results: str
    render: str
    inline: bool = False
    renders: bool = True
    folder: str = RESULTS
    many: bool = False

    @property
    def results_path(self) -> str:
        """The repository-relative path of this section's results file."""
        return f"{self.folder}/{self.results}.json"

    def text(self, result: dict) -> str:
        """This section's text, rendered from ``result`` (its results file's content)."""
        module, function = self.render.split(":")
        return getattr(importlib.import_module(module), function)(result)


def run_page(name: str) -> str:
    """The repository-relative path of the recorded run ``name``'s page."""
    return f"{RUNS}/{name}.md"


def media_link(plot: str) -> str:
    """The link from a run's page to its plot ``plot``, kept in ``MEDIA``."""
    return doc_link(f"{MEDIA}/{Path(plot).name}", run_page("any"))


def _readme(name: str, results: str, render: str, folder: str = RESULTS) -> Section:
    return Section(name, "README.md", "", results, render, inline=True, folder=folder)


def _benchmark(name: str, results: str, render: str) -> Section:
    return _readme(f"readme_{name}", results, f"benchmarks.figures:{render}", BENCHMARK_RESULTS)


def _performance(name: str, results: str, render: str, inline: bool = True) -> Section:
    return Section(f"performance_{name}", "docs/performance.md", "", results, f"benchmarks.figures:{render}",
                   inline=inline, folder=BENCHMARK_RESULTS)


def _scaling(name: str, results: str, render: str) -> Section:
    return Section(f"scaling_{name}", "docs/scaling.md", "", results, render, inline=True)


SECTIONS = [
    Section("full_run", "docs/evaluation.md", "## The recorded full run", "full_run",
            "experiments.full_run:section_text", renders=False),  # rows without policy kinds, commands, sites
    Section("full_run_visuomotor", "docs/evaluation.md", "## The recorded full run (visuomotor)",
            "full_run_visuomotor", "experiments.full_run:section_text"),
    Section("act_gpu", "docs/evaluation.md", "### act on one GPU: pick_place from cameras, 5000 steps",
            "act_gpu_pick_place", "experiments.act_gpu_report:section_text"),
    Section("act_side_by_side", "docs/lerobot.md", "## ACT two ways: train/bc.py and lerobot-train, side by side",
            "act_side_by_side", "experiments.act_side_by_side:section_text", renders=False),  # no lerobot command
    Section("act_side_by_side_visuomotor", "docs/lerobot.md",
            "## ACT two ways: train/bc.py and lerobot-train, side by side (visuomotor)", "act_side_by_side_visuomotor",
            "experiments.act_side_by_side:section_text"),
    Section("distillation", "docs/distillation.md", "## The recorded distillation", "distillation",
            "experiments.distillation:section_text"),
    Section("distillation_train_seconds", "docs/distillation.md", "", "distillation",
            "experiments.distillation:train_seconds_text", inline=True),
    Section("scaling_data", "docs/scaling.md", "## Data scaling", "scaling", "experiments.scaling_report:section_text"),
    Section("scaling_data_visuomotor", "docs/scaling.md", "### Data scaling, visuomotor", "scaling_visuomotor",
            "experiments.scaling_report:section_text"),
    Section("scaling_compute", "docs/scaling.md", "## Compute scaling", "compute_scaling",
            "experiments.compute_scaling_report:section_text"),
    _scaling("duration", "scaling", "experiments.scaling_report:duration_text"),
    _scaling("duration_visuomotor", "scaling_visuomotor", "experiments.scaling_report:duration_text"),
    Section("fleet_vs_single", "docs/federated.md", "## Fleet vs single robot: measured", "fleet_vs_single",
            "experiments.fleet_vs_single:section_text"),
    Section("personal_ceiling", "docs/federated.md", "## How far personal weights could lift a site",
            "personal_ceiling", "experiments.personal_ceiling:section_text"),
    Section("fleet_rohe", run_page("fleet_rohe"), "# ROHE at several budgets", "fleet_rohe",
            "experiments.fleet_rohe:section_text"),
    Section("fleet_rohe_1_handovers", run_page("fleet_rohe_1_handovers"),
            "# ROHE at several budgets, at most 1 hand-over an episode", "fleet_rohe_1_handovers",
            "experiments.fleet_rohe:section_text"),
    Section("fleet_learning_runs", f"{RUNS}/README.md", "", "fleet_learning*",
            "experiments.fleet_learning_report:index_text", many=True),
    _readme("readme_full_run", "full_run", "experiments.full_run:over_expert_text"),
    _readme("readme_act_side_by_side", "act_side_by_side", "experiments.act_side_by_side:summary_text"),
    _readme("readme_act_side_by_side_visuomotor", "act_side_by_side_visuomotor",
            "experiments.act_side_by_side:summary_text"),
    _readme("readme_distillation", "distillation", "experiments.distillation:ratios_text"),
    _readme("readme_fleet_vs_single", "fleet_vs_single", "experiments.fleet_vs_single:fleet_gain_text"),
    _readme("readme_fedavg", "fleet_vs_single", "experiments.fleet_vs_single:fedavg_text"),
    _readme("readme_personal", "fleet_vs_single", "experiments.fleet_vs_single:personal_text"),
    _readme("readme_visuomotor", "full_run_visuomotor", "experiments.readme_figures:kinds_over_expert_text"),
    _readme("readme_act_gpu", "act_gpu_pick_place", "experiments.readme_figures:act_gpu_text"),
    _readme("readme_scaling", "scaling", "experiments.readme_figures:reach_text"),
    _readme("readme_scaling_visuomotor", "scaling_visuomotor", "experiments.readme_figures:reach_text"),
    _readme("readme_compute_scaling", "compute_scaling", "experiments.readme_figures:compute_checks_text"),
    Section("metaworld_mt50_state_demos", "docs/metaworld.md", "## MT50 from state: success against demonstrations",
            "metaworld_mt50_state*", "experiments.metaworld_report:demos_curve_text", many=True),
    _readme("readme_mt50_state", "metaworld_mt50_state", "experiments.readme_figures:many_tasks_text"),
    _benchmark("expert_success", "expert_success", "expert_text"),
    _benchmark("collect_speed", "collect_speed", "collect_text"),
    _benchmark("collect_speed_cameras", "collect_speed_cameras", "collect_text"),
    _benchmark("loader_speed", "loader_speed", "loader_text"),
    _benchmark("train_speed", "train_speed", "train_text"),
    _benchmark("train_speed_threads", "train_speed_threads", "threads_text"),
    _benchmark("train_speed_image", "train_speed_image", "image_text"),
    _benchmark("act_vs_lerobot", "act_vs_lerobot", "act_text"),
    _benchmark("act_vs_lerobot_gpu", "act_vs_lerobot_gpu", "act_text"),
    _benchmark("gpu_paths", "gpu_paths", "gpu_paths_text"),
    _benchmark("deploy_speed", "deploy_speed", "deploy_text"),
    _benchmark("eval_speed", "eval_speed", "eval_text"),
    _performance("sim_speed", "sim_speed", "sim_text"),
    _performance("collect_speed", "collect_speed", "collect_text"),
    _performance("collect_lost", "collect_speed", "collect_lost_text"),
    _performance("collect_speed_cameras", "collect_speed_cameras", "collect_text"),
    _performance("loader_table", "loader_speed", "loader_table", inline=False),
    _performance("loader_image", "loader_speed_image", "loader_image_text"),
    _performance("train_speed", "train_speed", "train_text"),
    _performance("train_detail", "train_speed", "train_detail_text"),
    _performance("gloo", "gloo_latency", "gloo_text"),
    _performance("threads", "train_speed_threads", "threads_text"),
    _performance("image", "train_speed_image", "image_text"),
    _performance("image_detail", "train_speed_image", "image_detail_text"),
    _performance("act_vs_lerobot", "act_vs_lerobot", "act_text"),
    _performance("act_vs_lerobot_gpu", "act_vs_lerobot_gpu", "act_text"),
    _performance("gpu_paths", "gpu_paths", "gpu_paths_text"),
    _performance("gpu_train", "train_speed_gpu", "gpu_train_text"),
    _performance("eval_speed", "eval_speed", "eval_detail_text"),
    Section("sim_expert_success", "docs/sim.md", "", "expert_success", "benchmarks.figures:expert_text",
            inline=True, folder=BENCHMARK_RESULTS),
    Section("sim_frame", "docs/sim.md", "", "sim_speed", "benchmarks.figures:frame_text", inline=True,
            folder=BENCHMARK_RESULTS),
    Section("goals_deploy_speed", "docs/fleet_learning.md", "", "deploy_speed", "benchmarks.figures:deploy_text",
            inline=True, folder=BENCHMARK_RESULTS),
]
FLEET_LEARNING = "fleet_learning"  # every fleet-learning run's results name starts so


def fleet_learning_section(name: str) -> Section:
    """The page of the fleet-learning run whose results are ``name``.json."""
    return Section(name, run_page(name), "", name, "experiments.fleet_learning_report:page_text")


def every_section(root: Path = REPO) -> list[Section]:
    """``SECTIONS``, and a section for each fleet-learning run recorded under ``root``."""
    runs = sorted((root / RESULTS).glob(f"{FLEET_LEARNING}*.json"))
    return SECTIONS + [fleet_learning_section(path.stem) for path in runs]


def section_for(name: str) -> Section:
    """The section an experiment writing the results ``name`` finishes with."""
    if name.startswith(FLEET_LEARNING):
        return fleet_learning_section(name)
    found = next((section for section in SECTIONS if section.results == name and not section.inline), None)
    if found is None:
        fail(f"no docs section renders the results {name} (experiments/render.py SECTIONS)")
    return found


def blank_page(name: str, heading: str) -> str:
    """A new doc that holds section ``name`` alone, under ``heading`` if any, before it is rendered."""
    return (f"{heading}\n\n" if heading else "") + "\n".join(markers(name)) + "\n"


def write(name: str, result: dict, doc: str | Path = "", heading: str = "") -> str:
    """Render the section of the results ``name`` from ``result`` into ``doc`` (default: the section's; a missing
    doc is created as a ``blank_page``), its markers appended under ``heading`` (default: the section's) where the
    doc lacks them; the text."""
    section = section_for(name)
    text = section.text(result)
    path, heading = Path(doc or REPO / section.doc), heading or section.heading
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(blank_page(section.name, heading))
    write_section(path, section.name, heading, text)
    return text


def read_results(path: Path, root: Path = REPO) -> dict:
    """The content of the results file ``path``; a one-line error where it is unreadable or does not match the
    digest it carries."""
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        fail(f"{shown}: not a readable results file ({str(error).splitlines()[0]})")
    if isinstance(result, dict) and DIGEST in result:
        try:
            check_results(path)
        except ValueError as error:
            fail(str(error).replace(str(path), str(shown), 1))
    return result


def render(root: Path = REPO, check: bool = False) -> list[str]:
    """Render every section under ``root`` into its doc (with ``check``, write nothing); one line per section
    that was stale."""
    documents: dict[str, str] = {}
    stale = []
    for section in (section for section in every_section(root) if section.renders):
        document = documents.get(section.doc)
        if document is None:
            path = root / section.doc
            if path.is_file():
                document = path.read_text()
            elif section.doc.startswith(f"{RUNS}/"):
                document = blank_page(section.name, section.heading)  # a run's page, written below
            else:
                fail(f"{section.doc}: no such doc, where section {section.name} goes")
        results = section.results_path
        text = section.text({path.stem: read_results(path, root) for path in sorted(root.glob(results))}
                            if section.many else read_results(root / results, root))
        try:
            documents[section.doc] = replaced_section(document, section.name, text, section.inline)
        except ValueError as error:
            fail(f"{section.doc}: {error}")
        if documents[section.doc] != document:
            stale.append(f"{section.doc}: section {section.name} differs from {results}; "
                         "run python -m experiments.render")
    if not check:
        for doc, document in documents.items():
            path = root / doc
            if not path.is_file() or path.read_text() != document:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(document)
    return stale


def main(argv: list[str] | None = None) -> None:
    """Render the docs, or ``--check`` them (exit 1 when a section is stale)."""
    parser = OneLineErrorParser(prog="python -m experiments.render", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a section is stale")
    parser.add_argument("--root", type=Path, default=REPO, help="the repository whose docs and results are read")
    arguments = parser.parse_args(argv)
    stale = render(arguments.root.resolve(), arguments.check)
    for line in stale:
        print(line)
    if not arguments.check:
        print(f"rendered {len(stale)} stale section(s)" if stale else "every section was up to date")
    elif stale:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
