"""The ``cnn`` policy: camera images plus state, regressed to an action chunk.

Each camera has its own image encoder; the encoders' features for every frame of
the observation window are concatenated with the normalised state and fed to the
MLP head of ``MLPPolicy`` (same loss, same head). Two encoders
(``--vision-backbone``):

- ``small``: three strided 3x3/5x5 convolutions with GroupNorm, pooled to a 4x4
  grid (which keeps where things are) and projected to ``EMBED`` features;
- ``resnet18``: torchvision's ResNet-18 without its classifier, randomly
  initialised (``weights=None``: nothing is downloaded), globally pooled and
  projected. It keeps its BatchNorm layers (training converts them to
  SyncBatchNorm on GPU).

Images are normalised per channel by the fleet statistics before the encoder.
"""

from __future__ import annotations

import numpy as np
import torch
import torchvision
from torch import nn

from dataset.inputs import is_image
from train.policies.options import VISION_BACKBONES
from train.policies.policy import MLPPolicy, PolicySpec, module_key

EMBED = 64  # features per camera and frame


def image_encoder(backbone: str, channels: int) -> nn.Module:
    """[N, C, H, W] normalised images -> [N, EMBED] features."""
    if backbone == "small":
        trunk = nn.Sequential(
            nn.Conv2d(channels, 32, 5, stride=2, padding=2), nn.GroupNorm(8, 32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.GroupNorm(8, 64), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.GroupNorm(8, 64), nn.ReLU(),
        )
        grid, width = 4, 64
    elif backbone == "resnet18":
        resnet = torchvision.models.resnet18(weights=None)
        if channels != 3:
            resnet.conv1 = nn.Conv2d(channels, 64, 7, stride=2, padding=3, bias=False)
        trunk = nn.Sequential(*list(resnet.children())[:-2])  # without avgpool and fc
        grid, width = 1, 512
    else:
        raise ValueError(f"--vision-backbone must be one of {VISION_BACKBONES}, got {backbone!r}")
    return nn.Sequential(trunk, nn.AdaptiveAvgPool2d(grid), nn.Flatten(), nn.Linear(width * grid * grid, EMBED),
                         nn.ReLU())


class CNNPolicy(MLPPolicy):
    """Behaviour cloning from camera images plus state (see the module docstring)."""

    images = "required"

    def __init__(self, spec: PolicySpec, stats: dict[str, dict[str, np.ndarray]]):
        super().__init__(spec, stats)
        backbone = spec.options.get("vision_backbone", "small")
        self.encoders = nn.ModuleDict({module_key(name): image_encoder(backbone, spec.features[name][0])
                                       for name in self.cameras})

    @classmethod
    def options(cls, options) -> dict:
        return {"options": {"vision_backbone": options.cnn.vision_backbone}}

    @property
    def cameras(self) -> list[str]:
        return [name for name in self.spec.features if is_image(name)]

    def encoded_width(self) -> int:
        state = sum(int(np.prod(shape)) for name, shape in self.spec.model_features().items() if not is_image(name))
        return self.spec.n_obs_steps * (state + EMBED * len(self.cameras))

    def encode(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = []
        for name in self.spec.model_features():
            if is_image(name):  # [B, T, C, H, W] -> encode B*T frames at once -> [B, T * EMBED]
                frames = inputs[name]
                parts.append(self.encoders[module_key(name)](frames.flatten(0, 1)).unflatten(0, frames.shape[:2])
                             .flatten(1))
            else:
                parts.append(inputs[name].flatten(1))
        return torch.cat(parts, dim=1)
