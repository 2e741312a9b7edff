"""The lerobot-train recipe of docs/lerobot.md runs as written, offline, on CPU (with fewer robots, episodes and
steps), and its commands are the ones experiments/act_side_by_side.py measured."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from collect_helpers import REPO, subprocess_env

DOC = REPO / "docs" / "lerobot.md"
MEASURED = REPO / "experiments" / "results" / "act_side_by_side_visuomotor.json"
SMALLER = {"--robots": 1, "--episodes": 1, "--steps": 2, "--save_freq": 2}  # the recipe's sizes, in the test
PLACES = ("--dataset.repo_id", "--dataset.root", "--output_dir")  # where the data and the run live


def recipe() -> list[str]:
    """The commands of the docs' bash block that runs lerobot-train, one line each (continuations joined)."""
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    block = next(block for block in blocks if "lerobot-train" in block)
    return [line.split("  #")[0].strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def smaller(command: str) -> str:
    """``command`` with the sizes of ``SMALLER`` in place of the recipe's (``--name N`` or ``--name=N``)."""
    for option, value in SMALLER.items():
        command = re.sub(rf"{option}([ =])\d+", rf"{option}\g<1>{value}", command)
    return command


def options(command: str) -> dict[str, str]:
    """A command's ``--name=value`` / ``--name value ...`` options (environment and program left out)."""
    found, name = {}, None
    for word in shlex.split(command):
        if word.startswith("--"):
            name, _, value = word.partition("=")
            found[name] = value
        elif name is not None:
            found[name] = f"{found[name]} {word}".strip()
    return found


@pytest.mark.slow
def test_the_recipe_runs_as_written_offline(tmp_path):
    env = {**subprocess_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_LEROBOT_HOME": str(tmp_path / "hf_lerobot"),
           "WANDB_MODE": "disabled",
           # nothing may download: a request goes to a proxy that is not there
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
    for command in map(smaller, recipe()):
        completed = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path,
                                   timeout=600)
        assert completed.returncode == 0, f"{command}\n{completed.stdout[-2000:]}{completed.stderr[-3000:]}"
    pretrained = next(tmp_path.glob("outputs/*/checkpoints/last/pretrained_model"))
    config = json.loads((pretrained / "config.json").read_text())
    assert config["type"] == "act" and config["pretrained_backbone_weights"] is None
    assert {"observation.state", "observation.images.front", "observation.images.wrist"} == set(
        config["input_features"])
    info = json.loads((tmp_path / "runs" / "eval" / "eval_info.json").read_text())  # evaluate's default --out
    assert info["checkpoint"]["format"] == "lerobot" and info["fleet"]["n_episodes"] == 1


def test_the_recipe_is_what_the_side_by_side_measured():
    """The docs' figure comes from the recipe: the same data, lerobot-train arguments and evaluation."""
    measured = json.loads(MEASURED.read_text())
    config, commands = measured["config"], recipe()
    collect = options(next(c for c in commands if c.startswith("collect")))
    assert (collect["--task"], int(collect["--robots"]), int(collect["--episodes"]), collect["--cameras"].split(),
            int(collect["--image-size"])) == (config["task"], config["robots"], config["episodes"],
                                              config["cameras"], config["image_size"])
    train = options(next(c for c in commands if "lerobot-train" in c))
    assert {k: v for k, v in train.items() if k not in PLACES} == {
        k: v for k, v in options(measured["lerobot_command"]).items() if k not in PLACES}
    evaluate = options(next(c for c in commands if c.startswith("evaluate")))
    assert (int(evaluate["--robots"]), int(evaluate["--episodes"])) == (config["eval_robots"],
                                                                         config["eval_episodes"])
