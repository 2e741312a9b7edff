"""Mixed precision: which ``--amp`` a run uses, and whether it can run where it is.

``--amp auto`` (the default) is bf16 autocast where it pays on the CPU: for a policy that
sees camera images (the convolutions are nearly all of its work) on a CPU with bfloat16
in hardware (AMX or AVX512-BF16, as /proc/cpuinfo reports them). Elsewhere it is ``none``:
a CPU without those units only emulates bfloat16, which is slower than float32, and a
policy on state alone spends too little in its matrix products to gain. GPUs keep
float32 unless asked. A resumed run carries on with the precision its checkpoint was
trained with.
"""

from __future__ import annotations

from pathlib import Path

import torch

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_bf16_units(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """The bfloat16 units this CPU reports (``BF16_CPU_FLAGS`` among its flags); none where it says nothing."""
    try:
        text = cpuinfo.read_text()
    except OSError:  # not Linux: no flags to read
        return ()
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return tuple(flag for flag in BF16_CPU_FLAGS if flag in flags)


def resolve_amp(amp: str, device: torch.device, sees_images: bool, resumed_amp: str | None = None) -> tuple[str, str]:
    """The precision a run of ``--amp amp`` uses on ``device``, and why (for the start line).

    ``resumed_amp``: the checkpoint's, which ``auto`` carries on; None for a fresh run (or a checkpoint that
    does not say).
    """
    if amp != "auto":
        return amp, ""
    if resumed_amp in ("none", "bf16", "fp16"):
        return resumed_amp, "auto: as the checkpoint was trained"
    units = cpu_bf16_units() if device.type == "cpu" else ()
    if units and sees_images:
        return "bf16", f"auto: this CPU has {' and '.join(units)}, and the policy sees cameras"
    if device.type != "cpu":
        return "none", "auto: float32 on GPU unless asked"
    return "none", ("auto: the policy sees no cameras" if units else "auto: this CPU has no bfloat16 units")


def check_amp(amp: str, device: torch.device) -> None:
    """A one-line ``ValueError`` where ``--amp`` cannot run on ``device``."""
    if amp == "fp16" and device.type != "cuda":
        raise ValueError("--amp fp16 needs a GPU (a GradScaler guards its float16 gradients there); "
                         "use --amp bf16 on CPU")
    if amp == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"--amp bf16 needs a GPU with bfloat16 ({torch.cuda.get_device_name(device)} has none); "
                         "use --amp fp16")
