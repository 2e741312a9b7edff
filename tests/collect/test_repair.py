"""``collect --repair`` under a crash and on a task that is not deterministic (docs/reliability.md).

The crash tests damage two of three robots in a copy of a small collection and run repair as
users do, in a subprocess that SIGKILLs its own process group at one step (``ROBOFLEET_CRASH_AT``,
see ``core.errors.crash_point``). Until a rerun finishes the repair, the manifest keeps every robot,
``dataset verify`` reports the robots under repair, ``dataset info`` shows them and training
refuses the store; the rerun's store then equals the undamaged original, file for file.
"""

import json
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import zarr

from collect_helpers import REPO, collected, subprocess_env
from collect.repair import ASIDE
from dataset.cli import main as dataset_main
from eval.cli import main as evaluate_main
from fault_helpers import assert_one_line, exit_code_of, flip_byte
from core.errors import CRASH_AT
from train.bc import main as bc_main
from train.checkpoint import open_checkpoint
from train_helpers import QUICK

pytestmark = pytest.mark.slow

# after the journal is written, after the stores are set aside, after the first episode a worker
# commits while recollecting, after the recollection verifies (before the journal goes)
STEPS = ["repair-recorded", "repair-set-aside", "collect-commit", "repair-verified"]


@pytest.fixture(scope="module")
def reach_fleet(tmp_path_factory):
    """3 robots x 2 reach episodes, committed one episode at a time. Read-only."""
    return collected(tmp_path_factory, "reach_repair", "--robots", "3", "--episodes", "2", "--task", "reach",
                     "--flush-frames", "1", "--workers", "1")


def damaged_copy(original, tmp_path):
    """A copy with robot 0's action chunk flipped and robot 2's episode_ends too."""
    store = shutil.copytree(original, tmp_path / "fleet")
    flip_byte(store / "robot_0000.zarr/data/action/c.0.0")
    flip_byte(store / "robot_0002.zarr/meta/episode_ends/c.0")
    return store


def repair(store, *options: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    environment = {**subprocess_env(), **({CRASH_AT: crash_at} if crash_at else {})}
    return subprocess.run([sys.executable, "-m", "collect.cli", "--repair", str(store), "--workers", "1", *options],
                          capture_output=True, text=True, env=environment, cwd=REPO, timeout=300,
                          start_new_session=True)  # its own process group: the crash kills that group


def files(store) -> dict[str, bytes]:
    """Every file of every robot store, by path (the manifest, with its timestamp, apart)."""
    return {str(path.relative_to(store)): path.read_bytes() for path in sorted(store.glob("robot_*.zarr/**/*"))
            if path.is_file()}


def robots_listed(store) -> dict:
    return json.loads((store / "manifest.json").read_text())["robots"]


@pytest.mark.parametrize("step", STEPS)
def test_a_repair_killed_at_any_step_loses_nothing_and_a_rerun_finishes_it(reach_fleet, trained_run, tmp_path,
                                                                           capsys, step):
    store = damaged_copy(reach_fleet, tmp_path)
    killed = repair(store, crash_at=step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert robots_listed(store) == robots_listed(reach_fleet)  # no robot dropped, none recounted
    assert exit_code_of(dataset_main, ["verify", store]) == 1
    printed = capsys.readouterr().out
    assert all(f"robot_000{robot}.zarr: under repair" in printed for robot in (0, 2)), printed
    assert exit_code_of(bc_main, ["--data", store, "--out", tmp_path / "run", *QUICK]) == 2
    assert_one_line(capsys.readouterr().err, "2 robot store(s)", "under repair (robot_0000.zarr, robot_0002.zarr)",
                    f"run `collect --repair {store}`")
    dataset_main(["info", str(store)])
    shown = capsys.readouterr()
    assert shown.out.count("under repair") == 2 and "2 robot store(s) are not usable" in shown.err
    trained_here = open_checkpoint(trained_run)  # a policy whose held-out seeds are checked against this store
    trained_here.data = str(store)
    assert exit_code_of(evaluate_main, ["--checkpoint", trained_here.write(tmp_path / "checkpoint"),
                                        "--out", tmp_path / "eval"]) == 2
    assert_one_line(capsys.readouterr().err, "has robot stores under repair", f"collect --repair {store}")

    finished = repair(store)
    assert finished.returncode == 0 and finished.stdout.strip().endswith("OK"), finished.stderr[-3000:]
    assert files(store) == files(reach_fleet)
    assert robots_listed(store) == robots_listed(reach_fleet)
    assert not (store / ASIDE).exists()
    dataset_main(["verify", str(store)])  # exits 0 (no SystemExit)
    assert capsys.readouterr().out.strip().endswith("OK")


def test_a_rerun_after_a_crash_recollects_a_damaged_partial_recollection_again(reach_fleet, tmp_path):
    store = damaged_copy(reach_fleet, tmp_path)
    assert repair(store, crash_at="collect-commit").returncode == -signal.SIGKILL
    (partial,) = [path for path in store.glob("robot_*.zarr") if (store / ASIDE / path.name).exists()]
    flip_byte(partial / "data/action/c.0.0")  # the recollection so far, damaged in turn
    finished = repair(store)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert files(store) == files(reach_fleet)


def test_repair_refuses_a_recollection_that_differs_and_puts_the_originals_back(tmp_path_factory, tmp_path):
    """A plug-in whose reset(seed) does not fix the goal: what repair makes again is not what was lost."""
    original = collected(tmp_path_factory, "noisy", "--robots", "2", "--episodes", "2", "--task",
                         "toy_tasks:NOISY_REACH", "--workers", "1", "--no-check-determinism")
    store = shutil.copytree(original, tmp_path / "fleet")
    states = zarr.open_group(store / "robot_0001.zarr", mode="r+")["data/observation.state"]
    states[-1, 0] = np.nan  # the last episode is damaged, the first one is intact
    damaged = files(store)
    unnamed = repair(store)  # the manifest names the plug-in: it is imported only on the user's word
    assert unnamed.returncode == 2 and files(store) == damaged, unnamed.stderr[-3000:]
    assert "names the plug-in task 'toy_tasks:NOISY_REACH'" in unnamed.stderr.splitlines()[-1]
    refused = repair(store, "--task", "toy_tasks:NOISY_REACH")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert_one_line(refused.stderr.splitlines()[-1], "refused to repair", "robot_0001.zarr episode 0",
                    "task 'toy_tasks:NOISY_REACH' does not make the same episode from the same seed",
                    "the damaged stores are back in place")
    assert files(store) == damaged and not (store / ASIDE).exists()
    assert robots_listed(store) == robots_listed(original)


def test_a_robot_store_of_another_collection_is_damage_that_repair_recollects(reach_fleet, tmp_path_factory,
                                                                              tmp_path, capsys):
    """Robot 1's store from a collection with another fleet seed, as two collect runs into one --out left it:
    verify and training name it, and a repair recollects it from the manifest's seeds."""
    other = collected(tmp_path_factory, "reach_seed_1", "--robots", "3", "--episodes", "2", "--task", "reach",
                      "--flush-frames", "1", "--workers", "1", "--seed", "1")
    store = shutil.copytree(reach_fleet, tmp_path / "fleet")
    shutil.rmtree(store / "robot_0001.zarr")
    shutil.copytree(other / "robot_0001.zarr", store / "robot_0001.zarr")

    assert exit_code_of(dataset_main, ["verify", store]) == 1
    found = capsys.readouterr().out
    assert "robot_0001.zarr: belongs to another collection: its own seed is 1, manifest.json's 0" in found
    assert exit_code_of(bc_main, [*QUICK, "--data", store, "--out", tmp_path / "run"]) == 2
    assert_one_line(capsys.readouterr().err, "robot_0001.zarr belongs to another collection than",
                    "its own seed is 1, manifest.json's 0", f"run `collect --repair {store}`")
    assert not (tmp_path / "run").exists()

    completed = repair(store)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "repaired: recollected robots 1 (2 episodes)" in completed.stdout
    assert files(store) == files(reach_fleet)
