"""--inputs: what a policy sees, saved and fed back by evaluate; image augmentation in training only."""

import json
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from collect_helpers import REPO, subprocess_env
from train.augment import MODEL_MEMORY_FORMAT, images_to_model, random_shift
from train.checkpoint import load_policy, open_checkpoint
from train.policies.options import PolicyOptions
from train.policies.policy import policy_spec
from fault_helpers import assert_one_line, exit_code_of
from train.bc import main as bc_main
from train_helpers import QUICK, metrics, train

PRIVILEGED = "observation.environment_state"
FRONT = "observation.images.front"
STORE_FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [3]},
    PRIVILEGED: {"dtype": "float32", "shape": [2]},
    FRONT: {"dtype": "image", "shape": [16, 16, 3]},
    "action": {"dtype": "float32", "shape": [2]},
}
STATE_ONLY = {name: feature for name, feature in STORE_FEATURES.items() if name != FRONT}


@pytest.mark.parametrize("kind, inputs, store, features", [
    ("mlp", "auto", STORE_FEATURES, ["observation.state", PRIVILEGED]),
    ("mlp", "state", STORE_FEATURES, ["observation.state", PRIVILEGED]),
    ("cnn", "auto", STORE_FEATURES, ["observation.state", FRONT]),
    ("cnn", "cameras", STORE_FEATURES, [FRONT]),
    ("cnn", "state+cameras", STORE_FEATURES, ["observation.state", PRIVILEGED, FRONT]),
    ("act", "auto", STORE_FEATURES, ["observation.state", FRONT]),
    ("act", "auto", STATE_ONLY, ["observation.state", PRIVILEGED]),
    ("act", "cameras", STORE_FEATURES, [FRONT]),
    ("diffusion", "auto", STORE_FEATURES, ["observation.state", FRONT]),
    ("diffusion", "state", STORE_FEATURES, ["observation.state", PRIVILEGED]),
])
def test_inputs_pick_the_features(kind, inputs, store, features):
    spec = policy_spec(PolicyOptions(policy=kind, inputs=inputs), store)
    assert list(spec.features) == features
    assert spec.inputs == ("proprio+cameras" if inputs == "auto" and FRONT in features
                           else "state" if inputs == "auto" else inputs)
    takes_images = FRONT in features
    assert (spec.image_shift, spec.colour_jitter) == ((4, 0.0) if takes_images else (0, 0.0))


@pytest.mark.parametrize("kind, inputs, store, message", [
    ("mlp", "proprio+cameras", STORE_FEATURES, "mlp takes no camera images (use --policy cnn, act or diffusion)"),
    ("cnn", "state", STORE_FEATURES, "leaves out (use --inputs proprio+cameras)"),
    ("cnn", "auto", STATE_ONLY, "the store has none (collect with --cameras front wrist)"),
    ("act", "proprio+cameras", STATE_ONLY, "the store has none (collect with --cameras front wrist)"),
    ("diffusion", "cameras", STORE_FEATURES, "diffusion conditions on observation.state"),
])
def test_inputs_a_policy_or_store_cannot_serve_are_refused_naming_the_fix(kind, inputs, store, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        policy_spec(PolicyOptions(policy=kind, inputs=inputs), store)


def test_an_unknown_input_choice_is_refused():
    with pytest.raises(ValueError, match="--inputs must be one of auto, state, proprio\\+cameras"):
        PolicyOptions(inputs="pixels")


def test_random_shift_is_a_crop_of_the_edge_padded_image():
    images = torch.randint(0, 256, (64, 12, 10, 3), dtype=torch.uint8)
    torch.manual_seed(0)
    shifted = random_shift(images, 3)
    assert shifted.dtype == torch.uint8 and shifted.shape == images.shape
    padded = F.pad(images.permute(0, 3, 1, 2).float(), (3, 3, 3, 3), mode="replicate").permute(0, 2, 3, 1)
    offsets = set()
    for image, result in zip(padded, shifted.float()):  # each result is one of the 7 x 7 windows of its image
        matches = [(dy, dx) for dy in range(7) for dx in range(7)
                   if torch.equal(image[dy: dy + 12, dx: dx + 10], result)]
        assert matches
        offsets.add(matches[0])
    assert len(offsets) > 10  # the offsets vary from image to image
    assert torch.equal(random_shift(images, 0), images)


@pytest.mark.slow
def test_augmentation_runs_in_training_mode_only(camera_fleet):
    from dataset import FleetStore
    from dataset.stats import fleet_stats
    from train.policies.policy import make_policy

    store = FleetStore.open(camera_fleet)
    spec = policy_spec(PolicyOptions(policy="cnn", colour_jitter=0.3), store.features)
    policy = make_policy(spec, fleet_stats(store))
    frames = torch.from_numpy(store.episode(0, 0)[FRONT][:8])[:, None]  # [8, 1, H, W, C] uint8, as the loader gives
    plain = policy.inputs["observation_images_front"](images_to_model(frames))
    policy.eval()
    torch.testing.assert_close(policy.normalised({FRONT: frames, "observation.state": torch.zeros(8, 1, 20)})[FRONT],
                               plain, rtol=0, atol=0)
    policy.train()
    augmented = policy.normalised({FRONT: frames, "observation.state": torch.zeros(8, 1, 20)})[FRONT]
    assert augmented.shape == plain.shape and not torch.allclose(augmented, plain)


def first_convolutions(policy: torch.nn.Module) -> list[torch.nn.Conv2d]:
    """The first convolution of every image encoder: where the images enter the network."""
    return [next(m for m in encoder.modules() if isinstance(m, torch.nn.Conv2d))
            for encoder in policy.encoders.values()]


@pytest.mark.parametrize("backbone", ["small", "resnet18"])
@pytest.mark.parametrize("training", [True, False])
def test_images_reach_the_first_convolution_in_the_memory_format_of_its_weights(backbone, training):
    from benchmarks.synthetic import synthetic_stats
    from train.policies.options import CNNOptions
    from train.policies.policy import make_policy

    spec = policy_spec(PolicyOptions(policy="cnn", image_shift=4, colour_jitter=0.3,
                                     cnn=CNNOptions(vision_backbone=backbone)), STORE_FEATURES)
    stats = {name: synthetic_stats(STORE_FEATURES[name]) for name in [*spec.features, "action"]}
    policy = make_policy(spec, stats).train(training)
    seen = []
    for conv in first_convolutions(policy):
        conv.register_forward_pre_hook(lambda module, args: seen.append((module.weight, args[0])))
    batch = {FRONT: torch.randint(0, 256, (4, spec.n_obs_steps, 16, 16, 3), dtype=torch.uint8),
             "observation.state": torch.zeros(4, spec.n_obs_steps, 3)}
    policy.predict_chunk(batch)
    assert seen
    for weight, images in seen:
        layout = torch.channels_last if weight.is_contiguous(memory_format=torch.channels_last) and \
            not weight.is_contiguous() else torch.contiguous_format
        assert layout == MODEL_MEMORY_FORMAT
        assert images.is_contiguous(memory_format=layout), images.stride()


def run_evaluate(*arguments) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval.cli", *map(str, arguments)], capture_output=True, text=True,
                          env=subprocess_env(), cwd=REPO, timeout=600)


@pytest.mark.slow
def test_a_visuomotor_policy_learns_and_evaluates_without_the_privileged_state(camera_cnn_run, camera_fleet,
                                                                                tmp_path):
    """cnn on proprio+cameras: its loss falls, its choice is saved, and evaluate runs it on an env without
    observation.environment_state, which refuses a state policy in one line."""
    run = camera_cnn_run
    losses = [record["loss"] for record in metrics(run) if "loss" in record]
    assert losses[-1] < 0.5 * losses[0], losses
    assert json.loads((run / "config.json").read_text())["config"]["policy"]["inputs"] == "proprio+cameras"
    saved = open_checkpoint(run)
    assert saved.spec.inputs == "proprio+cameras" and saved.config["policy"]["inputs"] == "proprio+cameras"
    policy, _ = load_policy(run)
    assert list(policy.spec.features) == ["observation.state", FRONT] and not policy.training

    blind_env = "toy_tasks:REACH_WITHOUT_PRIVILEGED_STATE"
    completed = run_evaluate("--checkpoint", run, "--task", blind_env, "--robots", 2, "--episodes", 2,
                             "--out", tmp_path / "eval", "--quiet")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert PRIVILEGED not in completed.stderr  # no privileged-state warning for a visuomotor policy
    info = json.loads((tmp_path / "eval" / "eval_info.json").read_text())
    assert info["fleet"]["n_episodes"] == 4 and info["fleet"]["n_errors"] == 0

    state_run = tmp_path / "state_run"
    assert train("--data", camera_fleet, "--out", state_run, "--max-steps", "2", "--batch-size", "16",
                 "--val-fraction", "0").returncode == 0
    completed = run_evaluate("--checkpoint", state_run, "--task", blind_env, "--out", tmp_path / "eval_state")
    assert completed.returncode == 2 and "needs observation.environment_state" in completed.stderr
    assert completed.stderr.strip().count("\n") == 0


    completed = run_evaluate("--checkpoint", state_run, "--robots", 1, "--episodes", 1, "--out", tmp_path / "eval_priv",
                             "--quiet")  # the state policy on its own task, whose store has cameras
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert [line for line in completed.stderr.splitlines() if "warning" in line] == [
        f"warning: the policy reads {PRIVILEGED} (the simulator's object poses and goal) where cameras are "
        "available: a real robot could not run it (train on --inputs proprio+cameras)"]


@pytest.mark.parametrize("arguments, message", [
    (["--policy", "mlp", "--inputs", "proprio+cameras"], "mlp takes no camera images"),
    (["--policy", "cnn", "--inputs", "pixels"], "--inputs must be one of"),
    (["--policy", "cnn", "--image-shift", "-1"], "--image-shift must not be negative"),
])
def test_bad_inputs_are_one_line_errors(camera_fleet, arguments, message, tmp_path, capsys):
    """bc.py's main in this process (bad input as users meet it: tests/train/test_train.py)."""
    assert exit_code_of(bc_main, [*QUICK, "--data", camera_fleet, "--out", tmp_path / "run", *arguments]) == 2
    assert_one_line(capsys.readouterr().err, message)
    assert not (tmp_path / "run").exists()
