"""experiments.render: the committed docs and README are up to date with the committed results, a changed results
file (an experiment's or a benchmark's) makes its section stale until rendered, a recorded run's missing page is
created (and listed in experiments/runs/README.md), and a doc whose markers are missing or doubled gets one line.
Everything but the first test renders into temporary copies of the docs and results."""

import json
import shutil

import pytest

from core.files import REPO
from experiments import render
from experiments.results_file import DIGEST, payload_sha256

RESULTS = "experiments/results/fleet_vs_single.json"


def test_the_committed_docs_are_up_to_date_with_the_committed_results(capsys):
    render.main(["--check"])  # exits 1 on a stale section
    assert capsys.readouterr().out == ""


@pytest.fixture
def copy(tmp_path):
    """A copy of every doc and results file the sections read."""
    for section in render.every_section():
        for path in (REPO / section.doc, *REPO.glob(section.results_path)):
            copied = tmp_path / path.relative_to(REPO)
            copied.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copied)
    return tmp_path


def edit_results(root, change, results: str = RESULTS) -> None:
    path = root / results
    result = json.loads(path.read_text())
    change(result)
    path.write_text(json.dumps(result))


def fleet_gain(result: dict) -> None:
    result["results"]["goals"]["fleet beats single by >= 8 points"]["value"] = 42.0
    result["results"]["central"]["success"]["fleet"] = 57.7


def test_a_changed_figure_is_named_by_check_and_render_writes_it(copy, capsys):
    edit_results(copy, fleet_gain)
    with pytest.raises(SystemExit) as stale:
        render.main(["--check", "--root", str(copy)])
    assert stale.value.code == 1
    lines = capsys.readouterr().out.splitlines()
    assert set(lines) == {f"{doc}: section {name} differs from {RESULTS}; run python -m experiments.render"
                          for doc, name in (("docs/federated.md", "fleet_vs_single"),
                                            ("README.md", "readme_fleet_vs_single"))}
    assert "+42.0 points" not in (copy / "README.md").read_text()  # --check writes nothing

    render.main(["--root", str(copy)])
    assert "<!-- readme_fleet_vs_single:start -->+42.0 points<!-- readme_fleet_vs_single:end -->" in (
        copy / "README.md").read_text()
    assert "| central | all 9, 2 DDP ranks | 57.7% " in (copy / "docs/federated.md").read_text()
    render.main(["--check", "--root", str(copy)])  # up to date now


def test_a_changed_benchmark_result_makes_check_name_its_readme_span(copy, capsys):
    results = "benchmarks/results/eval_speed.json"
    edit_results(copy, lambda result: result["ratios"].update(eval_2w_vs_loop=1.5), results)
    with pytest.raises(SystemExit) as stale:
        render.main(["--check", "--root", str(copy)])
    assert stale.value.code == 1
    assert set(capsys.readouterr().out.splitlines()) == {
        f"{doc}: section {name} differs from {results}; run python -m experiments.render"
        for doc, name in (("README.md", "readme_eval_speed"), ("docs/performance.md", "performance_eval_speed"))}

    render.main(["--root", str(copy)])
    assert "<!-- readme_eval_speed:start -->1.50×<!-- readme_eval_speed:end -->" in (copy / "README.md").read_text()


@pytest.mark.parametrize("change, problem", [("", "missing"), ("twice", "doubled")])
def test_a_doc_whose_markers_are_missing_or_doubled_gets_one_line(copy, capsys, change, problem):
    doc = copy / "docs/federated.md"
    start = "<!-- personal_ceiling:start -->"
    doc.write_text(doc.read_text().replace(start, start * 2 if change else ""))
    with pytest.raises(SystemExit) as failed:
        render.main(["--root", str(copy)])
    assert failed.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: docs/federated.md: the markers of section personal_ceiling are {problem}")
    assert error.count("\n") == 1


def test_a_results_file_that_does_not_match_its_digest_is_refused(copy, capsys):
    def sealed_then_edited(result: dict) -> None:
        result[DIGEST] = payload_sha256(result)
        fleet_gain(result)

    edit_results(copy, sealed_then_edited)
    with pytest.raises(SystemExit):
        render.main(["--check", "--root", str(copy)])
    assert capsys.readouterr().err == f"error: {RESULTS} does not match its {DIGEST}: it was changed after the " \
                                      "runner wrote it\n"


def test_a_recorded_run_without_its_page_gets_it_from_render_and_a_line_in_the_index(copy, capsys):
    run = "fleet_learning_state"
    page, index = copy / render.run_page(run), copy / render.RUNS / "README.md"
    committed = page.read_text()
    page.unlink()
    index.write_text(index.read_text().replace(f"| [{run}]({run}.md) |", "| [gone](gone.md) |"))
    with pytest.raises(SystemExit):
        render.main(["--check", "--root", str(copy)])
    assert set(capsys.readouterr().out.splitlines()) == {
        f"{render.run_page(run)}: section {run} differs from experiments/results/{run}.json; "
        "run python -m experiments.render",
        f"{render.RUNS}/README.md: section fleet_learning_runs differs from experiments/results/fleet_learning*.json; "
        "run python -m experiments.render"}
    assert not page.exists()  # --check writes nothing

    render.main(["--root", str(copy)])
    assert page.read_text() == committed
    assert f"| [{run}]({run}.md) | pick_place | state |" in index.read_text()
    assert "](../../docs/media/fleet_learning_state_pick_place.png)" in committed  # the plot, from the page
    render.main(["--check", "--root", str(copy)])
