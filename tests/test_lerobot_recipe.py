"""The lerobot-train recipe of docs/evaluation.md runs as written, offline, on CPU (with fewer robots, episodes and
steps)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from collect_helpers import REPO, subprocess_env

DOC = REPO / "docs" / "evaluation.md"
SMALLER = {"--robots": 1, "--episodes": 1, "--steps": 2, "--save_freq": 2}  # the recipe's sizes, in the test


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

