"""Camera images into the model: uint8 frames to float, with training-only augmentation.

Images travel as the store keeps them, uint8 ``[..., H, W, C]``, from the loader (or
the env) to the policy's device, and are turned into float ``[..., C, H, W]`` in
[0, 1] there: a quarter of the bytes through the loader, and the conversion runs
batched where the model runs. They leave in ``MODEL_MEMORY_FORMAT``, the memory order
of every image encoder's weights (torch's default, NCHW): a permuted view would reach
the convolutions in channels-last order and send them, and GroupNorm's backward, down
torch's slower mixed-layout paths. The reorder is done on the uint8 bytes, before they
become floats. In training two augmentations can run on the way
(both batched, on the device, every image drawing its own):

- **random shift** (``shift`` pixels): the image is padded by repeating its edge
  pixels and a window of the original size is cut at a random offset in
  ``[0, 2 * shift]`` along each axis, so it moves by up to ``shift`` pixels (DrQ's
  augmentation). Evaluation sees the image as it is.
- **colour jitter** (``strength``): brightness and contrast are each scaled by a
  factor drawn from ``[1 - strength, 1 + strength]``.
"""

from __future__ import annotations

import torch

MODEL_MEMORY_FORMAT = torch.contiguous_format


def random_shift(images: torch.Tensor, shift: int) -> torch.Tensor:
    """``images`` [N, H, W, C] (any dtype), each moved by up to ``shift`` pixels along each axis.

    Padding by repeating the edge pixels and cutting a window at an offset is the same
    as reading every pixel at a clamped index, which is what this does: one gather.
    """
    n, height, width, _ = images.shape
    dy, dx = torch.randint(-shift, shift + 1, (2, n, 1), device=images.device)
    rows = (dy + torch.arange(height, device=images.device)).clamp_(0, height - 1)  # [N, H]
    cols = (dx + torch.arange(width, device=images.device)).clamp_(0, width - 1)  # [N, W]
    sample = torch.arange(n, device=images.device)[:, None, None]
    return images[sample, rows[:, :, None], cols[:, None, :]]


def colour_jitter(images: torch.Tensor, strength: float) -> torch.Tensor:
    """``images`` float [N, C, H, W] in [0, 1] with random brightness and contrast, clipped to [0, 1]."""
    n = images.shape[0]
    brightness, contrast = 1 + strength * (2 * torch.rand(2, n, 1, 1, 1, device=images.device) - 1)
    mean = images.mean(dim=(1, 2, 3), keepdim=True)
    return ((images * brightness - mean) * contrast + mean).clamp(0, 1)


def images_to_model(images: torch.Tensor, shift: int = 0, strength: float = 0.0) -> torch.Tensor:
    """uint8 ``[..., H, W, C]`` -> float ``[..., C, H, W]`` in [0, 1] and ``MODEL_MEMORY_FORMAT``, augmented by
    ``shift`` and ``strength``.

    Pass ``shift=0, strength=0`` outside training: the image is only converted.
    """
    frames = images.flatten(0, -4)  # every leading axis (batch, time) into one
    if shift:
        frames = random_shift(frames, shift)
    frames = frames.permute(0, 3, 1, 2).contiguous(memory_format=MODEL_MEMORY_FORMAT).float().div_(255)
    if strength:
        frames = colour_jitter(frames, strength)
    return frames.unflatten(0, images.shape[:-3])
