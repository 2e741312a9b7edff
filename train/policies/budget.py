"""Sizing a policy before it is built: a checkpoint's spec is untrusted input.

A ``policy_spec`` edited to hidden widths of [25000, 25000] asks for 625 million parameters,
gigabytes allocated before its weights are found not to fit. ``check_policy`` builds the
policy on torch's meta device instead (shapes without memory), counting parameters and
buffers as they are registered: past ``max_parameters``, or past ``MAX_TENSORS`` tensors (a
spec of thousands of layers), the build stops there. The weights are then loaded into the
meta model, which checks their names and shapes against the spec's without copying them.
"""

from __future__ import annotations

import threading

import numpy as np
import torch
from torch.nn.modules.module import (register_module_buffer_registration_hook,
                                     register_module_parameter_registration_hook)

from core.errors import one_line, shortened
from core.untrusted import memory_bytes
from train.policies.policy import PolicySpec, make_policy

BYTES_PER_PARAMETER = 4  # float32
MAX_TENSORS = 10_000  # parameters and buffers: LeRobot's default ACT has 240, its default diffusion 219


def default_max_parameters() -> int:
    """The most parameters a checkpoint's policy may have unless told otherwise: a quarter of this
    machine's memory at 4 bytes a parameter."""
    return memory_bytes() // 4 // BYTES_PER_PARAMETER


class _TooLarge(Exception):
    pass


def check_policy(spec: PolicySpec, stats: dict[str, dict[str, np.ndarray]], weights: dict[str, torch.Tensor],
                 max_parameters: int | None = None) -> None:
    """Refuse, in a one-line ``ValueError``, a ``spec`` whose policy has more than ``max_parameters``
    (default ``default_max_parameters()``) parameters, does not build, or does not fit ``weights``;
    nothing of the policy's size is allocated."""
    limit = default_max_parameters() if max_parameters is None else max_parameters
    counted = {"values": 0, "tensors": 0}
    builder = threading.get_ident()

    def count(module, name, tensor):
        if tensor is None or threading.get_ident() != builder:  # another thread building its own model
            return
        counted["values"] += tensor.numel() if isinstance(tensor, torch.nn.Parameter) else 0
        counted["tensors"] += 1
        if counted["values"] > limit or counted["tensors"] > MAX_TENSORS:
            raise _TooLarge

    hooks = [register_module_parameter_registration_hook(count), register_module_buffer_registration_hook(count)]
    try:
        with torch.device("meta"):
            policy = make_policy(spec, stats)
    except _TooLarge:
        source = ("a quarter of this machine's memory at 4 bytes each; evaluate's --max-parameters raises it"
                  if max_parameters is None else "--max-parameters")
        what = (f"more than {limit:,} parameters ({source})" if counted["values"] > limit
                else f"more than {MAX_TENSORS:,} tensors")
        raise ValueError(f"its {spec.kind} policy would have {what}: refused before building it") from None
    except Exception as error:  # a spec its class cannot build: wrong types, unknown kind, bad options
        raise ValueError(f"its {spec.kind} policy does not build: {one_line(error)}") from None
    finally:
        for hook in hooks:
            hook.remove()
    try:
        policy.load_state_dict(weights, assign=True)
    except RuntimeError as error:  # missing, unexpected or misshapen weights, each on a line of its own
        lines = str(error).strip().splitlines()
        first = lines[1] if len(lines) > 1 else lines[0]
        raise ValueError(f"its weights do not fit its {spec.kind} policy: {shortened(first.strip())}") from None
