"""Speed of light: how close a measured call is to what the device can do.

A call that moves B bytes and does F floating-point operations cannot take less than
max(B / peak bandwidth, F / peak throughput) on a device. Its speed-of-light fraction is that lower
bound divided by the measured time, which equals max(achieved TB/s / peak TB/s, achieved TFLOP/s / peak
TFLOP/s); the larger term names the bound (memory or compute). B and F come from the definition's
`cost` expressions (the fewest bytes through device memory, the flops of the math), so a fraction near
1 means the kernel is near the hardware's limit for this work, whatever algorithm it uses.

Peaks come from a small table of datasheet values matched by the CUDA device name, or from the user
(`--peak-tbps` / `--peak-tflops`, or the KDA_TRACE_PEAK_TBPS / KDA_TRACE_PEAK_TFLOPS environment
variables), which replace the table's values. The CPU has no entry: its fraction is absent, not zero.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional, Tuple

ENV_TBPS = "KDA_TRACE_PEAK_TBPS"
ENV_TFLOPS = "KDA_TRACE_PEAK_TFLOPS"


@dataclass(frozen=True)
class DevicePeak:
    """Peak memory bandwidth (TB/s) and dense bf16 tensor-core throughput (TFLOP/s) of one device model."""

    model: str
    """The device model the values are for, e.g. 'H100 SXM5 80GB'."""
    tbps: Optional[float]
    tflops: Optional[float]
    source: str
    """Where the values come from: 'datasheet: <document>' or 'user' (an override)."""


# (pattern searched in the CUDA device name, case-insensitive; first match wins, so the specific come first).
# All values are NVIDIA datasheet figures (none is measured here; quoted from the datasheets named, not
# re-read from the PDFs when this table was written): memory bandwidth, and dense BF16 Tensor Core
# throughput (the datasheets list the "with sparsity" figure, twice the dense one, beside it).
DEVICE_PEAKS: Tuple[Tuple[str, DevicePeak], ...] = (
    (r"\bH100\b.*NVL", DevicePeak("H100 NVL 94GB", 3.9, 835.5, "datasheet: NVIDIA H100 Tensor Core GPU datasheet")),
    (r"\bH100\b.*PCIe", DevicePeak("H100 PCIe 80GB", 2.0, 756.0, "datasheet: NVIDIA H100 Tensor Core GPU datasheet")),
    (r"\bH100\b", DevicePeak("H100 SXM5 80GB", 3.35, 989.4, "datasheet: NVIDIA H100 Tensor Core GPU datasheet")),
    (r"\bGH200\b.*144G", DevicePeak("GH200 144GB HBM3e", 4.9, 989.4, "datasheet: NVIDIA GH200 Grace Hopper Superchip")),
    (r"\bGH200\b", DevicePeak("GH200 96GB HBM3", 4.0, 989.4, "datasheet: NVIDIA GH200 Grace Hopper Superchip")),
    (r"\bH200\b.*NVL", DevicePeak("H200 NVL 141GB", 4.8, 835.5, "datasheet: NVIDIA H200 Tensor Core GPU datasheet")),
    (r"\bH200\b", DevicePeak("H200 SXM 141GB", 4.8, 989.4, "datasheet: NVIDIA H200 Tensor Core GPU datasheet")),
    (r"\bB200\b", DevicePeak("B200 (HGX, per GPU)", 8.0, 2250.0, "datasheet: NVIDIA HGX B200 (8 GPUs: 64 TB/s, "
                                                                "36 PFLOPS BF16 with sparsity)")),
    (r"\bA100\b.*80GB.*PCIe|\bA100\b.*PCIe.*80GB", DevicePeak("A100 PCIe 80GB", 1.935, 312.0,
                                                      "datasheet: NVIDIA A100 Tensor Core GPU datasheet")),
    (r"\bA100\b.*80GB", DevicePeak("A100 SXM4 80GB", 2.039, 312.0, "datasheet: NVIDIA A100 Tensor Core GPU datasheet")),
    (r"\bA100\b", DevicePeak("A100 40GB", 1.555, 312.0, "datasheet: NVIDIA A100 Tensor Core GPU datasheet")),
    (r"\bL40S\b", DevicePeak("L40S", 0.864, 362.05, "datasheet: NVIDIA L40S GPU datasheet")),
    (r"\bL40\b", DevicePeak("L40", 0.864, 181.0, "datasheet: NVIDIA L40 GPU datasheet")),
    (r"\bL4\b", DevicePeak("L4", 0.3, 121.0, "datasheet: NVIDIA L4 Tensor Core GPU datasheet")),
    (r"\bA10\b", DevicePeak("A10", 0.6, 125.0, "datasheet: NVIDIA A10 Tensor Core GPU datasheet")),
)


def _env_float(name: str) -> Optional[float]:
    text = os.environ.get(name)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a number") from None
    if not value > 0:
        raise ValueError(f"{name}={text!r}: must be positive")
    return value


def table_peak(device_name: str) -> Optional[DevicePeak]:
    """The table's entry for a CUDA device name (e.g. 'NVIDIA H100 80GB HBM3'), or None."""
    if not device_name or device_name.lower().startswith("cpu"):
        return None
    for pattern, peak in DEVICE_PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return peak
    return None


def device_peak(device_name: str, tbps: Optional[float] = None, tflops: Optional[float] = None) -> Optional[DevicePeak]:
    """The peaks for a device: the given overrides, else the environment variables, else the table.

    An override of one value keeps the table's other one (the source then says both). None for the CPU
    (its timings are interpreter wall time) and for an unknown GPU with no override."""
    tbps = tbps if tbps is not None else _env_float(ENV_TBPS)
    tflops = tflops if tflops is not None else _env_float(ENV_TFLOPS)
    for name, value in (("peak TB/s", tbps), ("peak TFLOP/s", tflops)):
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if not device_name or device_name.lower().startswith("cpu"):
        return None  # CPU timings are interpreter wall time: no speed-of-light figure
    known = table_peak(device_name)
    if tbps is None and tflops is None:
        return known
    if known is None:
        return DevicePeak(device_name, tbps, tflops, "user")
    source = "user" if tbps is not None and tflops is not None else f"user, else {known.source}"
    return DevicePeak(known.model, tbps if tbps is not None else known.tbps,
                      tflops if tflops is not None else known.tflops, source)


def sol_fraction(achieved_tbps: Optional[float], achieved_tflops: Optional[float],
                 peak) -> Tuple[Optional[float], Optional[str]]:
    """(fraction of the speed of light, 'memory' or 'compute'); (None, None) when nothing can be said
    (no peak for the device, or no cost for the definition). `peak`: anything with `tbps` and `tflops`
    (a DevicePeak, or a record's schema.DevicePeaks), or None."""
    if peak is None:
        return None, None
    terms = []
    if achieved_tbps is not None and peak.tbps:
        terms.append((achieved_tbps / peak.tbps, "memory"))
    if achieved_tflops is not None and peak.tflops:
        terms.append((achieved_tflops / peak.tflops, "compute"))
    if not terms:
        return None, None
    return max(terms)
