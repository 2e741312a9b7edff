"""python -m train.export: our act and diffusion as LeRobot pretrained_model directories, acting as ours do
(in lerobot directly, and evaluated through evaluate's LeRobot path)."""

import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from collect_helpers import REPO, subprocess_env
from eval import EvalConfig, run_evaluation
from eval.plan import make_plan
from sim.fleet import make_robot
from sim.tasks import resolve_task
from train.augment import images_to_model
from train.checkpoint import load_policy
from train.export import main as export_main
from train_helpers import train

pytestmark = pytest.mark.slow


def export(run, out) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "train.export", str(run), str(out)], capture_output=True, text=True,
                          env=subprocess_env(), cwd=REPO, timeout=300)


def as_lerobot_takes_it(observation: dict, features) -> dict[str, torch.Tensor]:
    """An env observation as lerobot-eval hands it to the preprocessor: images float C x H x W in [0, 1]."""
    return {name: images_to_model(torch.from_numpy(value)[None])[0] if name.startswith("observation.images.")
            else torch.from_numpy(value) for name, value in observation.items() if name in features}


@pytest.mark.parametrize("kind", ["act", "diffusion"])
def test_an_exported_policy_loads_in_lerobot_and_acts_as_ours(kind, camera_fleet, tmp_path):
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    run, out = tmp_path / "run", tmp_path / "pretrained_model"
    completed = train("--data", camera_fleet, "--out", run, "--policy", kind, "--max-steps", "3", "--batch-size", "8",
                      "--val-fraction", "0")
    assert completed.returncode == 0, completed.stderr[-3000:]
    completed = export(run, out)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert {"config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"} <= \
        {path.name for path in out.iterdir()}

    ours, _ = load_policy(run)
    config = PreTrainedConfig.from_pretrained(out)
    theirs = get_policy_class(config.type).from_pretrained(out)
    preprocessor, postprocessor = make_pre_post_processors(config, pretrained_path=out)
    assert config.type == kind and set(config.input_features) == set(ours.spec.features)

    env = resolve_task("reach").make_env(make_robot(0), cameras=("front",), image_size=32)
    observation, _ = env.reset(seed=5)
    ours.reset()
    theirs.reset()
    for step in range(10):  # past n_action_steps (8): a second chunk
        torch.manual_seed(step)  # diffusion draws its starting noise from torch's generator
        action = ours.select_action(observation)
        torch.manual_seed(step)
        lerobot_action = postprocessor(theirs.select_action(preprocessor(as_lerobot_takes_it(observation,
                                                                                              ours.spec.features))))
        np.testing.assert_allclose(lerobot_action[0].numpy(), action, rtol=1e-4, atol=1e-5)
        observation, *_ = env.step(action)

    if kind == "act":  # deterministic at inference (diffusion draws its noise in each worker: matched above)
        # evaluate runs the export through lerobot's API (eval/lerobot_policy.py): the same episodes as our run
        # the export records no training collection: its fleet seed is given
        ours, theirs = (run_evaluation(EvalConfig(checkpoint=str(path), task=task, robots=2, episodes=2, batch=2,
                                                  seed=0, workers=1, out=str(tmp_path / name), quiet=True))
                        for path, task, name in ((run, None, "ours"), (out, "reach", "theirs")))
        assert (ours["checkpoint"]["format"], theirs["checkpoint"]["format"]) == ("robofleet", "lerobot")
        episodes = [[(e["seed"], e["success"], e["steps"]) for e in info["per_episode"]] for info in (ours, theirs)]
        assert episodes[0] == episodes[1]
    else:  # evaluate plans the export as it plans our run: same kind, chunk, cameras and seeds
        ours_plan, theirs_plan = make_plan(EvalConfig(checkpoint=str(run))), make_plan(EvalConfig(checkpoint=str(out),
                                                                                                  task="reach", seed=0))
        assert theirs_plan.checkpoint_info["format"] == "lerobot"
        for key in ("policy", "n_action_steps"):
            assert theirs_plan.checkpoint_info[key] == ours_plan.checkpoint_info[key]
        assert theirs_plan.cameras == ours_plan.cameras and theirs_plan.seeds == ours_plan.seeds


def test_what_cannot_be_exported_is_a_one_line_error(pick_place_fleet, tmp_path, capsys):
    run = tmp_path / "mlp"
    assert train("--data", pick_place_fleet, "--out", run, "--max-steps", "2", "--batch-size", "8",
                 "--val-fraction", "0").returncode == 0
    completed = export(run, tmp_path / "out")  # the command line, once; the other cases in-process
    assert completed.returncode == 2 and "mlp has no LeRobot counterpart" in completed.stderr
    assert completed.stderr.strip().count("\n") == 0 and not (tmp_path / "out").exists()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    truncated = shutil.copytree(run, tmp_path / "truncated", symlinks=True)
    (truncated / "checkpoints" / "last" / "model.safetensors").write_bytes(b"cut short")
    for checkpoint, out, message in ((run, tmp_path / "taken", "is not an empty directory"),
                                     (tmp_path / "no_run", tmp_path / "out", "no checkpoint at"),
                                     (tmp_path / "taken" / "file", tmp_path / "out", "is not a RoboFleet checkpoint"),
                                     (truncated, tmp_path / "out", "no intact checkpoint")):
        with pytest.raises(SystemExit) as exited:
            export_main([str(checkpoint), str(out)])
        error = capsys.readouterr().err
        assert exited.value.code == 2 and message in error and error.strip().count("\n") == 0
    assert not (tmp_path / "out").exists()
