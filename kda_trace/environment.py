"""Where an evaluation ran: device name, driver, library versions, dataset revision, seed."""

from __future__ import annotations

import platform as _platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Dict, Optional

from . import platform
from .schema import Environment


def _version(package: str) -> Optional[str]:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=None)
def _driver_version() -> Optional[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


@lru_cache(maxsize=None)
def dataset_revision(root: str) -> Optional[str]:
    """`git rev-parse HEAD` of the dataset root (with `-dirty` when its dataset files have changes)."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "definitions", "workloads"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    rev = head.stdout.strip()
    return rev + ("-dirty" if dirty.stdout.strip() else "")


@lru_cache(maxsize=None)
def _libs(device: str) -> tuple:
    libs: Dict[str, str] = {"python": _platform.python_version()}
    for package in ("torch", "triton", "fla-core", "kda-trace"):
        v = _version(package)
        if v:
            libs[package] = v
    if device.startswith("cuda"):
        import torch

        libs["cuda"] = str(torch.version.cuda)
        driver = _driver_version()
        if driver:
            libs["driver"] = driver
    else:
        libs["triton_interpret"] = "1" if platform.triton_interpreted() else "0"
    return tuple(sorted(libs.items()))


def capture(device: str, seed: Optional[int], dataset_root: Optional[Path | str]) -> Environment:
    """The environment of this process for `device`."""
    return Environment(
        hardware=platform.device_name(device),
        libs=dict(_libs(device)),
        seed=seed,
        dataset_revision=dataset_revision(str(dataset_root)) if dataset_root is not None else None,
    )
