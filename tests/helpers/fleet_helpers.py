"""Fleet-learning tests' shared parts: a deployed store's columns and train/fleet_learn.py on a tiny fleet."""

import subprocess

import zarr

from collect.config import CollectConfig
from collect_helpers import REPO
from core.errors import CRASH_AT
from train.checkpoint import open_checkpoint
from train.fleet.deploy import Help, deploy_round
from train.fleet.gates import GateOptions
from train_helpers import QUICK, train_command, train_env


def columns(store_path, robot):
    """A robot's who-acted, label, action and success columns [frames, ...], its episode ends and its attrs."""
    group = zarr.open_group(store_path / f"robot_{robot:04d}.zarr", mode="r")
    return {name: group[f"data/{name}"][:].reshape(group["data/action"].shape[0], -1) for name in
            ("acted_by", "labelled", "action", "next.success")}, group["meta/episode_ends"][:], group.attrs



def deployment(trained_run, out, mode="stall", help_steps=120, robots=4, episodes=2, operators=2, scheduler=None,
               **gate):
    """One deployment round of ``trained_run`` on ``robots`` x ``episodes`` pick-place robots into ``out``, on the
    dask cluster at ``scheduler`` (a fresh local one if None)."""
    config = CollectConfig(robots=robots, episodes=episodes, task="pick_place", out=str(out), seed=0,
                           keep_failures=True, workers=2, scheduler=scheduler, quiet=True)
    help = Help(mode, GateOptions(**{"stall_steps": 10, **gate}), segment_steps=15, operators=operators)
    return deploy_round(config, str(open_checkpoint(trained_run).path), 1, help, help_steps, {"source": "test"})


# one round of 4 robots x 2 episodes, 2 operators, 80 expert steps
TINY_ROUND = ("--max-steps", "20", "--rounds", "1", "--round-steps", "5", "--fleet-robots", "4", "--deploy-episodes",
              "2", "--operators", "2", "--help-steps", "80", "--gate", "stall", "--stall-steps", "10", "--workers", "2")


def fleet_learn_command(run, data, *options, ranks=1) -> list[str]:
    """train/fleet_learn.py on a tiny fleet: ``TINY_ROUND``, then ``options``."""
    return train_command("--data", data, "--out", run, *TINY_ROUND, *options, ranks=ranks, script="fleet_learn.py")


def fleet_learn_arguments(run, data, *options) -> list:
    """``fleet_learn_command``'s arguments, for train/fleet_learn.py's ``main`` in this process."""
    return [*QUICK, "--data", data, "--out", run, *TINY_ROUND, *options]


def fleet_learn(run, data, *options, ranks=1, crash_at=None):
    """``fleet_learn_command`` run to its end (SIGKILLed at ``crash_at``, a crash point, if given)."""
    env = {**train_env(), **({CRASH_AT: crash_at} if crash_at else {})}
    return subprocess.run(fleet_learn_command(run, data, *options, ranks=ranks), capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=600, start_new_session=True)
