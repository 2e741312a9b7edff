"""LeRobot's ACT and Diffusion Policy behind our ``Policy`` interface.

The models are LeRobot's own (``ACTPolicy``, ``DiffusionPolicy`` with their config
classes, ``forward`` and chunk prediction); the adapters only translate:

- **Config.** ``PolicyFeature`` inputs from the store's features (``observation.state``
  -> STATE, ``observation.environment_state`` -> ENV, cameras -> VISUAL [C, H, W]),
  the window of the ``PolicySpec`` (ACT: ``n_obs_steps`` 1 and ``chunk_size`` =
  horizon; diffusion: ``n_obs_steps``, ``horizon``, ``n_action_steps``), then the
  spec's ``options``: ``SMALL`` sizes for CPU by default, LeRobot's defaults with
  ``--lerobot-config default``. Backbones are never pretrained (nothing downloads).
- **Normalisation.** lerobot 0.4 normalises in processors outside the model; here our
  ``Normalizer`` buffers do it around the model, in the mode of the config's
  ``normalization_mapping`` (ACT: mean/std; diffusion: min/max to [-1, 1] for state
  and action, as its sample clipping expects; ENV is not in LeRobot's mappings and
  stays unnormalised, as in lerobot-train). The checkpoint alone is enough to run.
- **Batch.** Our windows are LeRobot's layout. ACT takes one frame, so the
  ``n_obs_steps`` axis (of length 1) is dropped; diffusion's action window starts
  ``n_obs_steps - 1`` frames back (``PolicySpec.action_start``), as LeRobot's
  ``action_delta_indices`` do.

``head_keys`` name ACT's ``action_head`` and diffusion's U-Net ``final_conv``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
from lerobot.utils.constants import OBS_IMAGES

from dataset.inputs import PROPRIO_FEATURE, is_image
from train.policies.policy import Policy, PolicySpec

SMALL = {  # CPU-sized models; "default" keeps LeRobot's sizes
    "act": {"dim_model": 128, "n_heads": 4, "dim_feedforward": 512, "n_encoder_layers": 2, "n_decoder_layers": 1,
            "n_vae_encoder_layers": 2, "latent_dim": 16},
    "diffusion": {"down_dims": [64, 128], "diffusion_step_embed_dim": 64, "spatial_softmax_num_keypoints": 16,
                  "noise_scheduler_type": "DDIM", "num_inference_steps": 10},
}


def feature_type(name: str) -> FeatureType:
    """LeRobot's type of one of our input features (as ``dataset_to_policy_features`` assigns it)."""
    if is_image(name):
        return FeatureType.VISUAL
    return FeatureType.ENV if name == "observation.environment_state" else FeatureType.STATE


class LeRobotAdapter(Policy):
    """A LeRobot policy, its config built from our ``PolicySpec`` (see the module docstring)."""

    images = "optional"
    kind: str
    config_class: type
    policy_class: type

    def __init__(self, spec: PolicySpec, stats: dict[str, dict[str, np.ndarray]]):
        config = self.config_class(**{
            "input_features": {name: PolicyFeature(feature_type(name), tuple(shape))
                               for name, shape in spec.model_features().items()},
            "output_features": {"action": PolicyFeature(FeatureType.ACTION, (spec.action_dim,))},
            "device": "cpu", "push_to_hub": False, **self.window_fields(spec), **spec.options,
            "pretrained_backbone_weights": None})  # never pretrained: nothing may download at run time
        modes = config.normalization_mapping
        normalisation = {name: modes.get(feature_type(name).value, NormalizationMode.IDENTITY).value.lower()
                         for name in spec.normalised_features}
        normalisation["action"] = modes.get(FeatureType.ACTION.value, NormalizationMode.IDENTITY).value.lower()
        super().__init__(spec, stats, normalisation)
        self.lerobot_policy = self.policy_class(config)

    @classmethod
    def options(cls, options) -> dict:
        return {"options": dict(SMALL[cls.kind]) if options.lerobot.lerobot_config == "small" else {}}

    @staticmethod
    def window_fields(spec: PolicySpec) -> dict:
        """The config fields that fix the observation and action window."""
        raise NotImplementedError

    def normalised_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A training batch with normalised inputs and actions, as LeRobot's preprocessor hands it over."""
        return {**self.normalised(batch), "action": self.action(batch["action"]), "action_is_pad": batch["action_is_pad"]}


class ACTAdapter(LeRobotAdapter):
    """LeRobot's ACT (Action Chunking Transformer with its VAE objective)."""

    kind, config_class, policy_class = "act", ACTConfig, ACTPolicy

    @staticmethod
    def window_fields(spec: PolicySpec) -> dict:
        if spec.n_obs_steps != 1:
            raise ValueError(f"act takes one observation frame (--n-obs-steps 1), got {spec.n_obs_steps}")
        return {"n_obs_steps": 1, "chunk_size": spec.horizon, "n_action_steps": spec.n_action_steps}

    @staticmethod
    def current_frame(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """ACT's inputs have no time axis: [B, 1, ...] -> [B, ...]."""
        return {name: value[:, -1] if name.startswith("observation.") else value for name, value in batch.items()}

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = self.current_frame(self.normalised_batch(batch))
        if self.training:
            return self.lerobot_policy(inputs)[0]  # L1 + kl_weight * KL
        # ACT's forward needs the VAE's posterior, which exists in training only. Evaluation
        # scores what inference runs: the L1 term of the same loss, with the latent at zero.
        predicted = self.lerobot_policy.predict_action_chunk(inputs)
        return (F.l1_loss(predicted, inputs["action"], reduction="none") * ~inputs["action_is_pad"][..., None]).mean()

    def predict_chunk(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        was_training = self.lerobot_policy.training  # predict_action_chunk switches to eval mode
        chunk = self.lerobot_policy.predict_action_chunk(self.current_frame(self.normalised(observations)))
        self.lerobot_policy.train(was_training)
        return self.action.inverse(chunk)

    def head_keys(self) -> list[str]:
        return [key for key in self.state_dict() if key.startswith("lerobot_policy.model.action_head.")]


class DiffusionAdapter(LeRobotAdapter):
    """LeRobot's Diffusion Policy (a conditional 1D U-Net denoising the action window)."""

    kind, config_class, policy_class = "diffusion", DiffusionConfig, DiffusionPolicy

    @classmethod
    def options(cls, options) -> dict:
        return {**super().options(options), "action_start": 1 - options.observation_steps}

    @staticmethod
    def window_fields(spec: PolicySpec) -> dict:
        return {"n_obs_steps": spec.n_obs_steps, "horizon": spec.horizon, "n_action_steps": spec.n_action_steps}

    @classmethod
    def check_inputs(cls, inputs: str, features: dict[str, list[int]]) -> None:
        if PROPRIO_FEATURE not in features:
            raise ValueError(f"diffusion conditions on {PROPRIO_FEATURE}, which --inputs {inputs} leaves out "
                             "(use --inputs proprio+cameras)")

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.lerobot_policy(self.normalised_batch(batch))[0]

    @property
    def chunk_length(self) -> int:
        return self.spec.n_action_steps

    @torch.no_grad()
    def predict_chunk(self, observations: dict[str, torch.Tensor], noise: torch.Tensor | None = None) -> torch.Tensor:
        """``n_action_steps`` actions from the current frame; ``noise`` [B, horizon, A] fixes the starting sample."""
        inputs = self.normalised(observations)
        cameras = [name for name in self.spec.features if is_image(name)]
        if cameras:  # [B, T, C, H, W] per camera -> [B, T, cameras, C, H, W], as DiffusionPolicy stacks them
            inputs[OBS_IMAGES] = torch.stack([inputs[name] for name in cameras], dim=-4)
        return self.action.inverse(self.lerobot_policy.diffusion.generate_actions(inputs, noise=noise))

    def head_keys(self) -> list[str]:
        return [key for key in self.state_dict() if key.startswith("lerobot_policy.diffusion.unet.final_conv.")]
