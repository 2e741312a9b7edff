"""LeRobot ``pretrained_model`` directories as evaluation policies.

``lerobot-train`` 0.4 writes ``checkpoints/<step>/pretrained_model/`` (and ``train.export``
writes the same for our act and diffusion):

    config.json, model.safetensors                   the policy (PreTrainedPolicy.from_pretrained)
    policy_preprocessor.json / policy_postprocessor.json, *.safetensors
                                                     its processors: batching, device, normalisation
    train_config.json                                lerobot-train's config (its dataset root)

``describe_lerobot_policy`` reads what the plan needs from it without building the policy:
the policy type, its input features (names and shapes, images as C x H x W), its action
size and chunk length, and, where lerobot-train trained it on a ``dataset export-lerobot``
export, the task and fleet seed that export's ``meta/robofleet.json`` records.
``LeRobotAgent`` loads it through lerobot's own API (the policy class's ``from_pretrained``,
``make_pre_post_processors(pretrained_path=...)``) and runs it: ``lerobot_batch`` batches
the env observations as lerobot-eval hands them over (images from uint8 H x W x C to float
C x H x W in [0, 1]), then preprocessor, ``select_action`` (LeRobot keeps its own action
queue), postprocessor, and ``env_actions`` gives each env its numpy action.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import torch

from core.files import file_sha256
from dataset.inputs import is_image
from train.augment import images_to_model
from train.checkpoint import Checkpoint
from train.policies.policy import PolicySpec

POLICY_FILES = ("config.json", "model.safetensors")
SIDECAR = Path("meta") / "robofleet.json"  # written beside an export by dataset/lerobot_io.py


def is_lerobot_pretrained(path: str | Path) -> bool:
    """Whether ``path`` is a LeRobot pretrained_model directory."""
    return Path(path).is_dir() and all((Path(path) / name).is_file() for name in POLICY_FILES)


def _chunk_length(config: dict) -> int:
    return int(config.get("chunk_size") or config.get("horizon") or config.get("n_action_steps") or 1)


def _training_export(path: Path) -> dict:
    """The manifest of the RoboFleet collection behind the dataset lerobot-train used, if it is one of ours."""
    train_config = path / "train_config.json"
    if not train_config.is_file():
        return {}
    root = (json.loads(train_config.read_text()).get("dataset") or {}).get("root")
    sidecar = Path(root) / SIDECAR if root else None
    if sidecar is None or not sidecar.is_file():
        return {}
    return json.loads(sidecar.read_text()).get("manifest") or {}


def describe_lerobot_policy(path: str | Path) -> Checkpoint:
    """What evaluation needs to know of a pretrained_model directory, as a ``Checkpoint`` of format
    ``lerobot`` without weights: its spec (kind, features, inputs, n_action_steps, horizon), features
    (shapes as the env gives them: images H x W x C), task and fleet seed (from the training export,
    or None), step (from ``checkpoints/<step>/``, or None). Raises ValueError for a directory whose
    config.json is not a LeRobot policy config.
    """
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text())
        kind, inputs = config["type"], config["input_features"]
        action_shape = config["output_features"]["action"]["shape"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path / 'config.json'} is not a LeRobot policy config ({error!r})") from None
    shapes = {name: list(feature["shape"]) for name, feature in inputs.items()}
    env_shapes = {name: shape[1:] + shape[:1] if is_image(name) else shape
                  for name, shape in shapes.items()}
    manifest = _training_export(path)
    step = path.parent.name
    task = ({"name": manifest["task"]["name"], "reference": (manifest.get("data_config") or {}).get("task")}
            if manifest.get("task") else None)
    spec = PolicySpec(kind=kind, features=shapes, inputs="+".join(shapes),
                      n_action_steps=int(config.get("n_action_steps") or 1), horizon=_chunk_length(config))
    return Checkpoint(spec=spec, weights={}, stats={}, format="lerobot", path=path,
                      features={**{name: {"shape": shape} for name, shape in env_shapes.items()},
                                "action": {"shape": list(action_shape)}},
                      task=task, identity={"seed": manifest.get("seed")}, step=int(step) if step.isdigit() else None,
                      weights_sha256=file_sha256(path / "model.safetensors"))


def lerobot_batch(observations: list[dict], names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """A LeRobot policy's input batch from one env observation per env (``names``: the features to take,
    by default all): each feature stacked over the envs, cameras as float [B, C, H, W] in [0, 1], the
    rest as float32 [B, ...]."""
    batch = {}
    for name in names or list(observations[0]):
        values = torch.from_numpy(np.stack([observation[name] for observation in observations]))
        batch[name] = images_to_model(values) if is_image(name) else values.float()
    return batch


def env_actions(actions: torch.Tensor) -> list[np.ndarray]:
    """One numpy action per env from a policy's [B, A] actions, on whatever device they are."""
    return list(actions.detach().cpu().numpy())


class LeRobotAgent:
    """A LeRobot policy and its processors, acting on a batch of env observations (see the module docstring)."""

    name = "policy"

    def __init__(self, path: str | Path, device: str, n_action_steps: int | None = None):
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        config = PreTrainedConfig.from_pretrained(path)
        config.device = device
        if n_action_steps is not None:
            config.n_action_steps = n_action_steps
        with contextlib.redirect_stdout(io.StringIO()):  # from_pretrained prints "Loading weights from local directory"
            policy = get_policy_class(config.type).from_pretrained(path, config=config)
        self.policy = policy.to(device).eval()
        self.preprocessor, self.postprocessor = make_pre_post_processors(
            config, pretrained_path=str(path), preprocessor_overrides={"device_processor": {"device": device}})
        self.inputs = list(config.input_features)

    def start(self, seeds: list[int]) -> None:
        self.policy.reset()

    @torch.no_grad()
    def act(self, observations: list[dict], active: list[bool]) -> list[np.ndarray]:
        batch = lerobot_batch(observations, self.inputs)
        return env_actions(self.postprocessor(self.policy.select_action(self.preprocessor(batch))))
