"""evaluate on LeRobot pretrained_model directories: lerobot-train's own (our exports:
tests/train/test_lerobot_export.py), and the env observation <-> LeRobot batch helpers."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import sim
from collect_helpers import subprocess_env
from dataset.cli import main as dataset_main
from eval import EvalConfig, run_evaluation
from eval.cli import main as evaluate_main
from eval.lerobot_policy import env_actions, lerobot_batch
from fault_helpers import assert_one_line, exit_code_of

SMALL_ACT = ["--policy.dim_model=64", "--policy.dim_feedforward=128", "--policy.n_encoder_layers=1",
             "--policy.n_decoder_layers=1", "--policy.chunk_size=16", "--policy.n_action_steps=8"]


def evaluation(checkpoint, out, **options) -> dict:
    return run_evaluation(EvalConfig(checkpoint=str(checkpoint), robots=2, episodes=2, workers=1, out=str(out),
                                     quiet=True, **options))


@pytest.mark.slow
def test_an_offline_lerobot_train_checkpoint_is_evaluated_on_the_fleet(pick_place_fleet, tmp_path):
    export, out = tmp_path / "export", tmp_path / "lerobot_train"
    dataset_main(["export-lerobot", str(pick_place_fleet), str(export)])
    completed = subprocess.run(
        [sys.executable, "-m", "lerobot.scripts.lerobot_train", "--dataset.repo_id=robofleet/fleet",
         f"--dataset.root={export}", "--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false",
         *SMALL_ACT, "--steps=4", "--batch_size=4", "--save_freq=4", "--eval_freq=0", "--num_workers=0",
         "--wandb.enable=false", f"--output_dir={out}"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**subprocess_env(), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert completed.returncode == 0, completed.stderr[-3000:]

    info = evaluation(out / "checkpoints" / "last" / "pretrained_model", tmp_path / "eval")  # no --task
    checkpoint = info["checkpoint"]
    assert (checkpoint["format"], checkpoint["policy"], checkpoint["step"]) == ("lerobot", "act", 4)
    assert info["task"] == "pick_place" and info["fleet"]["n_episodes"] == 4 and info["fleet"]["n_errors"] == 0
    assert info["setup"]["fleet_seed_from"].startswith("the LeRobot policy's training export")


def save_small_act(directory, camera: str) -> None:
    """An untrained ACT from observation.state and a 32 x 32 camera, saved as a pretrained_model with processors."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    features = {"observation.state": PolicyFeature(FeatureType.STATE, (20,)),
                f"observation.images.{camera}": PolicyFeature(FeatureType.VISUAL, (3, 32, 32))}
    config = ACTConfig(input_features=features, output_features={"action": PolicyFeature(FeatureType.ACTION, (5,))},
                       pretrained_backbone_weights=None, device="cpu", dim_model=32, dim_feedforward=64)
    stats = {name: {"mean": torch.zeros(feature.shape), "std": torch.ones(feature.shape)}
             for name, feature in {**features, **config.output_features}.items()}
    ACTPolicy(config).save_pretrained(directory)
    for pipeline in make_pre_post_processors(config, dataset_stats=stats):
        pipeline.save_pretrained(directory)


def test_env_observations_become_a_lerobot_batch_and_actions_come_back_per_env():
    env = gym.make("robofleet/PickPlace-v0", cameras=["front", "wrist"], image_size=(32, 48))
    observations = [env.reset(seed=seed)[0] for seed in (0, 1)]
    batch = lerobot_batch(observations)
    assert set(batch) == set(observations[0])
    for camera in ("front", "wrist"):
        image = batch[f"observation.images.{camera}"]
        assert image.shape == (2, 3, 32, 48) and image.dtype == torch.float32
        assert 0 <= image.min() < image.max() <= 1
        stored = torch.from_numpy(observations[1][f"observation.images.{camera}"]).permute(2, 0, 1)
        torch.testing.assert_close(image[1] * 255, stored.float())  # the same pixels, channels first
    assert batch["observation.state"].shape == (2, 20) and batch["observation.state"].dtype == torch.float32
    np.testing.assert_allclose(batch["observation.state"][0].numpy(), observations[0]["observation.state"])
    assert list(lerobot_batch(observations, ["observation.state"])) == ["observation.state"]

    actions = env_actions(torch.linspace(-1, 1, 10).reshape(2, 5).requires_grad_())
    assert len(actions) == 2 and all(isinstance(a, np.ndarray) and a.shape == (5,) for a in actions)
    np.testing.assert_allclose(actions[1], np.linspace(-1, 1, 10)[5:], atol=1e-6)
    assert env.action_space.contains(actions[0].astype(np.float32))
    env.close()


def test_the_documented_loop_drives_an_env_with_a_lerobot_policy(tmp_path):
    """docs/lerobot.md's "Your own loop", on an untrained ACT from state and a 32 x 32 front camera."""
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    path = tmp_path / "act"
    save_small_act(path, "front")
    policy = get_policy_class("act").from_pretrained(path).eval()
    preprocess, postprocess = make_pre_post_processors(policy.config, pretrained_path=str(path))
    env = gym.make("robofleet/PickPlace-v0", profile=sim.make_robot(0), cameras=["front"], image_size=32)
    observation, info = env.reset(seed=0)
    for _ in range(3):
        batch = preprocess(lerobot_batch([observation], list(policy.config.input_features)))
        action = env_actions(postprocess(policy.select_action(batch)))[0]
        assert action.shape == (5,) and np.isfinite(action).all()
        observation, reward, terminated, truncated, info = env.step(action)
    env.close()


def test_a_lerobot_policy_wanting_what_the_env_lacks_is_one_line(tmp_path, capsys):
    save_small_act(tmp_path / "top_camera", "top")
    assert exit_code_of(evaluate_main, ["--checkpoint", tmp_path / "top_camera", "--out", tmp_path / "eval"]) == 2
    assert_one_line(capsys.readouterr().err, "the LeRobot policy does not name its task", "give --task")
    arguments = ["--checkpoint", tmp_path / "top_camera", "--task", "pick_place", "--out", tmp_path / "eval"]
    assert exit_code_of(evaluate_main, arguments) == 2
    assert_one_line(capsys.readouterr().err, "the fleet seed is unknown (the checkpoint does not record its training "
                    "collection): give --seed")
    arguments += ["--seed", "0"]
    assert exit_code_of(evaluate_main, arguments) == 2
    assert_one_line(capsys.readouterr().err, "cannot make the pick_place env with the policy's cameras "
                    "(observation.images.top): ValueError: unknown camera(s) ['top']")
    assert exit_code_of(evaluate_main, [*arguments, "--n-action-steps", "101"]) == 2
    assert_one_line(capsys.readouterr().err, "--n-action-steps 101 is longer than the act policy's chunk of 100")
    assert not (tmp_path / "eval").exists() and json.loads((tmp_path / "top_camera" / "config.json").read_text())
