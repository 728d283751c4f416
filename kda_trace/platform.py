"""The one place that decides the device and whether Triton runs compiled or interpreted."""

from __future__ import annotations

import os
from functools import lru_cache

import torch


@lru_cache(maxsize=None)
def has_cuda() -> bool:
    """True when a CUDA device can be used."""
    return torch.cuda.is_available()


def default_device() -> str:
    """`"cuda"` when a GPU is present, else `"cpu"`."""
    return "cuda" if has_cuda() else "cpu"


def resolve_device(device: str | None) -> str:
    """Check a user-given device name (or None for the default) and return it."""
    if device is None:
        return default_device()
    if device.startswith("cuda") and not has_cuda():
        raise ValueError(f"device {device!r} was asked for but no CUDA device is available")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise ValueError(f"unknown device {device!r}: use 'cuda', 'cuda:N' or 'cpu'")
    return device


def triton_interpreted() -> bool:
    """True when Triton kernels run through the interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def ensure_triton_can_run(device: str) -> None:
    """On the CPU, Triton kernels only run through the interpreter: switch it on before triton loads
    any kernel. Call this before importing a module that defines @triton.jit kernels."""
    if not device.startswith("cuda"):
        os.environ["TRITON_INTERPRET"] = "1"


def cuda_device_count() -> int:
    """How many CUDA devices can be used (0 without CUDA)."""
    return torch.cuda.device_count() if has_cuda() else 0


def device_name(device: str) -> str:
    """A human name for `device`: the GPU model, or 'cpu (<processor>)'."""
    if device.startswith("cuda") and has_cuda():
        return torch.cuda.get_device_name(torch.device(device))
    import platform as _platform

    return f"cpu ({_platform.processor() or _platform.machine()})"


def device_identity(device: str) -> tuple[str, str | None]:
    """(`cuda:<index>` or `cpu`, the GPU's UUID as nvidia-smi prints it, or None) for `device`."""
    if not (device.startswith("cuda") and has_cuda()):
        return "cpu", None
    d = torch.device(device)
    index = d.index if d.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    text = str(uuid) if uuid is not None else None
    if text and not text.startswith("GPU-"):
        text = f"GPU-{text}"
    return f"cuda:{index}", text
