"""cnn, act and diffusion through train/bc.py: they train, checkpoint, load and drive real envs."""

import numpy as np
import pytest

from sim.fleet import make_robot
from sim.tasks import resolve_task
from fault_helpers import assert_one_line, exit_code_of
from train_helpers import QUICK, metrics, summary, train
from train.bc import main as bc_main
from train.checkpoint import load_policy, open_checkpoint

pytestmark = pytest.mark.slow

FLEETS = {"camera": ("reach", ("front",)), "pick_place": ("pick_place", ())}  # fixture -> task, cameras


def observations_of(task: str, cameras: tuple[str, ...], robots: int) -> tuple[list, list[dict]]:
    """``robots`` real envs of ``task`` (32x32 cameras, as the camera fleet) and their first observations."""
    spec = resolve_task(task)
    envs = [spec.make_env(make_robot(robot), cameras=cameras, image_size=32) for robot in range(robots)]
    return envs, [env.reset(seed=10 + i)[0] for i, env in enumerate(envs)]


@pytest.mark.parametrize("kind, fleet", [("cnn", "camera"), ("act", "pick_place"), ("diffusion", "camera"),
                                         ("diffusion", "pick_place")])  # act on images: tests/train/test_policy.py
def test_a_policy_trains_and_its_checkpoint_drives_envs(kind, fleet, request, tmp_path):
    data, run = request.getfixturevalue(f"{fleet}_fleet"), tmp_path / "run"
    completed = train("--data", data, "--out", run, "--policy", kind, "--max-steps", "8", "--batch-size", "16",
                      "--log-interval", "4", "--val-fraction", "0.3", "--val-interval", "8", "--lr", "1e-3")
    assert completed.returncode == 0, completed.stderr[-3000:]
    records = metrics(run)
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 2 and np.isfinite(losses).all() and np.isfinite(records[-1]["val_loss"])
    ended = summary(completed)  # the run's last line
    assert ended["steps"] == "8" and float(ended["last"]) == pytest.approx(records[-1]["val_loss"], rel=1e-3)
    images = open_checkpoint(run).spec.n_obs_steps * len(FLEETS[fleet][1])  # camera images per window
    if images:  # images/s and samples/s are rounded apart
        samples = int(ended["samples"].replace(",", ""))
        assert int(ended["images"].replace(",", "")) == pytest.approx(images * samples, abs=images)
    else:
        assert ended["images"] is None
    if kind != "diffusion":  # diffusion's denoising loss is too noisy to fall reliably in 8 steps
        assert losses[-1] < losses[0], losses

    policy, checkpoint = load_policy(run)
    task, cameras = FLEETS[fleet]
    images = {name for name in policy.spec.features if name.startswith("observation.images.")}
    assert images == {f"observation.images.{camera}" for camera in cameras}  # the store's cameras, when it has them
    assert policy.head_keys() and set(policy.head_keys()) <= set(checkpoint.weights)

    envs, observations = observations_of(task, cameras, robots=2)
    policy.reset()
    batched = np.stack([policy.select_action({k: np.stack([o[k] for o in observations]) for k in observations[0]})
                        for _ in range(9)])  # 9 > n_action_steps: a second chunk
    policy.reset()
    single = policy.select_action(observations[0])
    action_dim = checkpoint.features["action"]["shape"][0]
    assert batched.shape == (9, 2, action_dim) and single.shape == (action_dim,)
    assert np.isfinite(batched).all() and np.isfinite(single).all()
    _, _, _, _, info = envs[0].step(single)  # the action drives the real env
    assert "is_success" in info


@pytest.mark.cluster
def test_act_on_a_camera_trains_under_two_torchrun_ranks_without_warnings(camera_fleet, tmp_path):
    run = tmp_path / "ddp"
    completed = train("--data", camera_fleet, "--out", run, "--policy", "act", "--max-steps", "2",
                      "--batch-size", "8", "--log-interval", "1", "--val-fraction", "0", ranks=2)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert metrics(run)[-1] == {"step": 2, "ranks_in_sync": True, "world_size": 2}
    assert open_checkpoint(run).spec.kind == "act"
    # its backbone's 1x1 convolutions once made DDP warn of gradient strides that did not match its bucket
    assert "Warning" not in completed.stderr, completed.stderr[-3000:]


@pytest.mark.parametrize("fleet, arguments, message", [
    ("pick_place", ["--policy", "cnn"], "needs camera images"),
    ("pick_place", ["--policy", "act", "--n-obs-steps", "2"], "--n-obs-steps must be 1 for act"),
    ("pick_place", ["--policy", "cnn", "--vision-backbone", "vgg"], "--vision-backbone must be"),
    ("pick_place", ["--policy", "diffusion", "--horizon", "10"], "horizon should be an integer multiple"),
    ("pick_place", ["--policy", "diffusion", "--n-action-steps", "16"], "--n-action-steps must be in 1..15"),
])
def test_bad_policy_options_are_one_line_errors(fleet, arguments, message, request, tmp_path, capsys):
    """bc.py's main in this process (bad input as users meet it: tests/train/test_train.py)."""
    data = request.getfixturevalue(f"{fleet}_fleet")
    assert exit_code_of(bc_main, [*QUICK, "--data", data, "--out", tmp_path / "run", *arguments]) == 2
    assert_one_line(capsys.readouterr().err, message)
    assert not (tmp_path / "run" / "checkpoints").exists()
