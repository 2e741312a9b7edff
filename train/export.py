"""Export a bc.py act or diffusion checkpoint as a LeRobot ``pretrained_model`` directory.

    python -m train.export runs/act exported/act          # RUN (or a checkpoint file) -> OUT

OUT is what ``lerobot-train`` 0.4 writes into ``checkpoints/<step>/pretrained_model``:

- ``config.json`` and ``model.safetensors``: the LeRobot policy itself (our act and
  diffusion are LeRobot's ``ACTPolicy`` and ``DiffusionPolicy``, so the weights go
  over as they are);
- ``policy_preprocessor.json`` / ``policy_postprocessor.json`` with their state files:
  LeRobot's processor pipelines (batch dimension, device, normalisation of the inputs;
  unnormalisation of the actions) holding the checkpoint's own normalisation. The
  preprocessor first resizes every camera image to the size the policy was trained at
  (LeRobot's ``image_crop_resize_processor``, bilinear with antialiasing): an image
  already at that size passes unchanged, and ``lerobot-eval --env.type=metaworld``, whose
  env renders corner2 at 480 x 480 whatever the policy wants, reaches the policy at its size.

``PreTrainedPolicy.from_pretrained(OUT)`` and ``make_pre_post_processors(config,
pretrained_path=OUT)`` load it, and the policy gives the same actions as ``load_policy``
for the same observations (images as LeRobot takes them: float C x H x W in [0, 1]).
The statistics written are those the checkpoint normalises with (its ``Normalizer``
buffers), so nothing is recomputed. mlp and cnn are ours alone: they have no LeRobot
counterpart, and exporting one is a one-line error (evaluate runs them from the run). A
multi-task policy exports when trained with ``--no-task-input`` (it tells the tasks from its
images, as LeRobot's policies do); one that reads the task one-hot does not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from core.errors import fail, quiet_closed_pipes
from core.lock import output_lock
from train.checkpoint import load_policy
from train.policies.policy import Normalizer, module_key

EXPORTABLE = ("act", "diffusion")


def lerobot_stats(normalizer: Normalizer, mode: str) -> dict[str, torch.Tensor]:
    """LeRobot's statistics that normalise as ``normalizer`` does in ``mode`` (mean_std, min_max or identity)."""
    mean, std = normalizer.mean.detach().clone(), normalizer.std.detach().clone()
    if mode == "min_max":  # our buffers hold the range's centre and half-width
        return {"min": mean - std, "max": mean + std}
    return {"mean": mean, "std": std}


def image_resize_step(config):
    """LeRobot's step that resizes every image input to ``config``'s image size (H, W); it is one size for all
    cameras (bc.py's --image-size), and None (the step passes everything through) for a policy without cameras."""
    from lerobot.processor import ImageCropResizeProcessorStep

    sizes = {tuple(feature.shape[1:]) for feature in config.image_features.values()}
    if len(sizes) > 1:
        raise ValueError(f"the policy's cameras have different sizes {sorted(sizes)}: one resize cannot serve them")
    return ImageCropResizeProcessorStep(resize_size=next(iter(sizes), None))


def export_lerobot_policy(checkpoint: Path, out: Path) -> Path:
    """Write the act or diffusion policy of ``checkpoint`` to ``out`` (see the module docstring); returns ``out``.

    Raises ValueError for another kind of policy, a multi-task one, or an ``out`` that is not empty.
    """
    from lerobot.policies.factory import make_pre_post_processors

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty directory: export into a new one")
    policy, _ = load_policy(checkpoint)
    if policy.spec.task_count:
        raise ValueError(f"{checkpoint} is a multi-task policy, which reads its task as a one-hot beside "
                         "observation.state: LeRobot's policies have no such input, so it does not export "
                         "(train it with --no-task-input to tell the tasks from its images)")
    if policy.spec.kind not in EXPORTABLE:
        raise ValueError(f"{policy.spec.kind} has no LeRobot counterpart: only {' and '.join(EXPORTABLE)} export "
                         "(evaluate runs the others from their run directory)")
    config = policy.lerobot_policy.config
    modes = policy.normalisation
    stats = {name: lerobot_stats(policy.inputs[module_key(name)], modes[name]) for name in policy.spec.features}
    stats["action"] = lerobot_stats(policy.action, modes["action"])
    out.mkdir(parents=True, exist_ok=True)
    policy.lerobot_policy.save_pretrained(out)
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=stats)
    preprocessor.steps.insert(len(preprocessor.steps) - 1, image_resize_step(config))  # before the normaliser
    preprocessor.save_pretrained(out)
    postprocessor.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, help="a bc.py run directory, its checkpoints/last or a checkpoint file")
    parser.add_argument("out", type=Path, help="the pretrained_model directory to write (new or empty)")
    args = parser.parse_args(argv)
    try:
        with output_lock(args.out, "python -m train.export", "OUT"):
            out = export_lerobot_policy(args.checkpoint, args.out)
    except (OSError, ValueError) as error:  # no intact checkpoint there, a kind that does not export
        fail(str(error))
    print(f"wrote {out}: load it with lerobot's from_pretrained and make_pre_post_processors", file=sys.stdout)


if __name__ == "__main__":
    main()
