"""Compressing model updates for the wire: int8 quantisation (DDP's int8 comm hook, federated deltas)
and top-k sparsification with error feedback (federated deltas).

``quantize_int8`` maps a float tensor to int8 with one scale per block of ``block``
values (symmetric: ``scale = max|x| / 127``), so one outlier only coarsens its own
block. ``dequantize_int8`` inverts it; every value comes back within half a step,
``|x - dequantize_int8(*quantize_int8(x))| <= scale / 2`` for its block.

``topk_sparsify`` keeps the largest-magnitude fraction of the entries. ``encode_update``
and ``decode_update`` turn a flat update into a wire payload and back with either method
(or none); top-k carries an error-feedback residual from one update to the next.
"""

from __future__ import annotations

import math
import pickle

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


# ----- top-k sparsification with error feedback ------------------------------------------------------------


def topk_sparsify(values: torch.Tensor, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``ceil(fraction * n)`` largest-magnitude entries of ``values`` (flattened): int32 indices, ascending, and their values."""
    flat = values.detach().reshape(-1).float()
    k = min(flat.numel(), max(1, math.ceil(fraction * flat.numel())))
    indices = torch.topk(flat.abs(), k, sorted=False).indices.sort().values
    return indices.to(torch.int32), flat[indices]


def densify(indices: torch.Tensor, kept: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The tensor shaped and typed like ``like`` that is ``kept`` at ``indices`` and zero elsewhere."""
    flat = torch.zeros(like.numel(), dtype=torch.float32)
    flat[indices.long()] = kept.float()
    return flat.reshape(like.shape).to(like.dtype)


# ----- model updates on the wire (federated deltas) ---------------------------------------------------------

COMPRESSIONS = ("none", "int8", "topk")


def encode_update(update: torch.Tensor, method: str, residual: torch.Tensor | None = None,
                  topk_fraction: float = 0.01) -> tuple[dict, torch.Tensor | None]:
    """A flat float update as a wire payload of numpy arrays, and the new error-feedback residual.

    ``none`` sends float32, ``int8`` block-quantised codes and scales, ``topk`` the indices
    and values of the largest ``topk_fraction`` of the entries. Top-k keeps what it did not
    send: it transmits the top-k of ``update + residual`` and returns the rest as the next
    residual (error feedback), so over rounds the transmitted updates plus the final residual
    add up to the true updates. The other methods return ``None`` as the residual.
    """
    flat = update.detach().reshape(-1).float()
    if method == "none":
        return {"method": method, "values": flat.numpy().copy()}, None
    if method == "int8":
        codes, scales = quantize_int8(flat)  # the padding of the last block is not sent
        return {"method": method, "codes": codes[: flat.numel()].numpy(), "scales": scales.numpy()}, None
    if method == "topk":
        corrected = flat if residual is None else flat + residual.reshape(-1).float()
        indices, kept = topk_sparsify(corrected, topk_fraction)
        new_residual = corrected.clone()
        new_residual[indices.long()] = 0.0
        return {"method": method, "indices": indices.numpy(), "values": kept.numpy().copy()}, new_residual
    raise ValueError(f"unknown compression {method!r}; choose from {', '.join(COMPRESSIONS)}")


def decode_update(payload: dict, like: torch.Tensor) -> torch.Tensor:
    """The update (shaped and typed like ``like``) that ``encode_update`` made ``payload`` from."""
    method = payload["method"]
    arrays = {key: torch.tensor(value) for key, value in payload.items() if key != "method"}  # copies: may be read-only
    if method == "none":
        return arrays["values"].reshape(like.shape).to(like.dtype)
    if method == "int8":
        codes, scales = arrays["codes"], arrays["scales"]
        return dequantize_int8(torch.nn.functional.pad(codes, (0, len(scales) * INT8_BLOCK - len(codes))), scales, like)
    if method == "topk":
        return densify(arrays["indices"], arrays["values"], like)
    raise ValueError(f"unknown compression {method!r}; choose from {', '.join(COMPRESSIONS)}")


def payload_bytes(payload) -> int:
    """Bytes of ``payload`` serialised (pickle, as dask sends it): what a transfer costs on the wire."""
    return len(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
