"""The floors of the code (DESIGN.md, "The flow"): core → sim → dataset → collect → train → eval, and the
scripts above them all (experiments, benchmarks). A module imports only its own floor and those below it, no
import circle closes between modules, and the ground floor and the store readers stay light."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from collect_helpers import REPO, subprocess_env

FLOORS = ["core", "sim", "dataset", "collect", "train", "eval", "experiments", "benchmarks"]
RANK = {"core": 0, "sim": 1, "dataset": 2, "collect": 3, "train": 4, "eval": 5, "experiments": 6, "benchmarks": 6}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the floors: dotted name -> file."""
    return {module_name(path): path for floor in FLOORS for path in sorted((REPO / floor).rglob("*.py"))}


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The floors' modules that ``path`` imports anywhere in it: at the top, in a function, under TYPE_CHECKING."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from package import submodule`` imports the submodule; ``from module import name`` the module
            targets = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                       for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in known)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) for name, path in known.items()}


def test_no_module_imports_a_later_floor():
    graph = import_graph()
    upward = sorted(f"{name} imports {target}" for name, targets in graph.items() for target in targets
                    if RANK[target.split(".")[0]] > RANK[name.split(".")[0]])
    assert not upward, "\n".join(upward)


def test_no_import_circle_between_modules():
    graph = import_graph()
    circles, state = [], {}  # state: 1 while a module is on the path, 2 when done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                circles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not circles, "\n".join(circles)


def loaded_by(statement: str) -> set[str]:
    """The heavy packages (mujoco, torch) that running ``statement`` in a fresh interpreter imports."""
    probe = f"import sys; {statement}; print('loaded:', *(m for m in ('mujoco', 'torch') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, env=subprocess_env(),
                            timeout=120, check=True)
    return set(result.stdout.splitlines()[-1].split()[1:])  # the statement's own output comes first


@pytest.mark.parametrize("module", sorted(name for name in modules() if name.split(".")[0] == "core"))
def test_the_ground_floor_imports_neither_mujoco_nor_torch(module):
    assert loaded_by(f"import {module}") == set()


def test_dataset_info_imports_neither_mujoco_nor_torch(pick_place_fleet):
    statement = f"from dataset.cli import main; main(['info', {str(pick_place_fleet)!r}])"
    assert loaded_by(statement) == set()
