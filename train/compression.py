"""Compressing model updates for the wire: int8 quantisation (DDP's int8 comm hook, federated deltas).

``quantize_int8`` maps a float tensor to int8 with one scale per block of ``block``
values (symmetric: ``scale = max|x| / 127``), so one outlier only coarsens its own
block. ``dequantize_int8`` inverts it; every value comes back within half a step,
``|x - dequantize_int8(*quantize_int8(x))| <= scale / 2`` for its block.
"""

from __future__ import annotations

import torch

INT8_BLOCK = 1024


def quantize_int8(values: torch.Tensor, block: int = INT8_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """``values`` (any shape, float) as int8 codes [N] (padded to whole blocks) and float32 scales [N / block]."""
    flat = values.detach().reshape(-1).float()
    padded = torch.nn.functional.pad(flat, (0, -len(flat) % block)).reshape(-1, block)
    scales = padded.abs().amax(dim=1).clamp_min(1e-30) / 127.0
    codes = torch.round(padded / scales[:, None]).clamp_(-127, 127).to(torch.int8)
    return codes.reshape(-1), scales


def dequantize_int8(codes: torch.Tensor, scales: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The float tensor shaped and typed like ``like`` that ``codes`` and ``scales`` encode."""
    values = (codes.reshape(len(scales), -1).float() * scales[:, None]).reshape(-1)[: like.numel()]
    return values.reshape(like.shape).to(like.dtype)
