"""Speed of light: the device table, overrides, and the fraction with its bound."""

import pytest

from kda_trace import roofline
from kda_trace.roofline import device_peak, sol_fraction, table_peak


@pytest.mark.parametrize("name, model", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"),
    ("NVIDIA H100 PCIe", "H100 PCIe 80GB"),
    ("NVIDIA H100 NVL", "H100 NVL 94GB"),
    ("NVIDIA H200", "H200 SXM 141GB"),
    ("NVIDIA H200 NVL", "H200 NVL 141GB"),
    ("NVIDIA B200", "B200 (HGX, per GPU)"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L40", "L40"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA GH200 480GB", "GH200 96GB HBM3"),
])
def test_device_names_match_their_entry(name, model):
    assert table_peak(name).model == model


def test_every_entry_is_a_named_datasheet_value():
    for _, peak in roofline.DEVICE_PEAKS:
        assert peak.source.startswith("datasheet: ") and peak.tbps > 0 and peak.tflops > 0


def test_unknown_devices_and_the_cpu_have_none(monkeypatch):
    monkeypatch.delenv(roofline.ENV_TBPS, raising=False)
    monkeypatch.delenv(roofline.ENV_TFLOPS, raising=False)
    assert table_peak("NVIDIA A1000 Mystery") is None  # not an A100 / A10 by accident
    assert device_peak("NVIDIA A1000 Mystery") is None
    assert device_peak("cpu (x86_64)") is None
    assert device_peak("cpu (x86_64)", tbps=1.0, tflops=1.0) is None  # interpreter timing: no SOL


def test_overrides(monkeypatch):
    monkeypatch.delenv(roofline.ENV_TBPS, raising=False)
    monkeypatch.delenv(roofline.ENV_TFLOPS, raising=False)
    both = device_peak("NVIDIA H100 80GB HBM3", tbps=3.0, tflops=700.0)
    assert (both.tbps, both.tflops, both.source) == (3.0, 700.0, "user")
    one = device_peak("NVIDIA H100 80GB HBM3", tbps=3.0)
    assert (one.tbps, one.tflops) == (3.0, 989.4) and one.source.startswith("user, else datasheet")
    monkeypatch.setenv(roofline.ENV_TFLOPS, "500")
    env = device_peak("NVIDIA Unknown GPU")
    assert (env.tbps, env.tflops, env.source) == (None, 500.0, "user")
    monkeypatch.setenv(roofline.ENV_TBPS, "fast")
    with pytest.raises(ValueError, match="KDA_TRACE_PEAK_TBPS"):
        device_peak("NVIDIA H100 80GB HBM3")


def test_fraction_is_the_larger_term_with_its_bound():
    h100 = table_peak("NVIDIA H100 80GB HBM3")
    # 1.675 TB/s of 3.35 is 0.5; 98.94 TFLOP/s of 989.4 is 0.1: memory bound at one half
    assert sol_fraction(1.675, 98.94, h100) == (pytest.approx(0.5), "memory")
    assert sol_fraction(0.335, 494.7, h100) == (pytest.approx(0.5), "compute")
    assert sol_fraction(None, 494.7, h100) == (pytest.approx(0.5), "compute")
    assert sol_fraction(None, None, h100) == (None, None)  # no cost formula
    assert sol_fraction(1.0, 1.0, None) == (None, None)     # no peaks: absent, not zero
