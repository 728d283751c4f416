"""The gate kernel (kda_trace/kernels/gate.py) against an independent float64 formula (kernel_ground_truth.ref_gate,
which uses torch.log1p), under the Triton interpreter on small odd shapes."""

from __future__ import annotations

import pytest
import torch

from kda_trace.platform import default_device, ensure_triton_can_run

DEVICE = default_device()
ensure_triton_can_run(DEVICE)

from kda_trace.kernels.gate import kda_gate
from kda_trace.solutions.ours_train import build_gate, gate_options, supports

from kernel_ground_truth import FakeDefinition, ref_gate

f64 = torch.float64


def inputs(shape, H, K, seed, dtype=torch.bfloat16, spread=3.0):
    gen = torch.Generator().manual_seed(seed)
    g_raw = (torch.randn(*shape, H, K, generator=gen) * spread).to(dtype)
    A_log = torch.rand(H, generator=gen) * 2.77
    dt_bias = torch.rand(H, K, generator=gen) * 4 - 5
    return g_raw, A_log, dt_bias


def max_error(g, g_raw, A_log, dt_bias, gate, lb=-5.0):
    """The largest error of g against the float64 formula, in units of what float32 can give: float32
    rounding of the gate's argument z (x = g_raw + dt_bias; z = exp(A_log) x for the safe gate) is a relative
    2^-24 |z| change of z, which moves exp-like tails (sigmoid(z), softplus(x) for z, x << 0) by that much
    relatively. So |g - ref| / |ref| is held to a few ulp times (1 + |z|). Below |ref| = 1e-30 (a safe gate
    at z < -60) float32's sigmoid underflows (1 / (1 + exp(88)) is 0): there |g - ref| must be < 1e-30, no
    decay to float32. Returns the largest relative error divided by (1 + |z|)."""
    ref = ref_gate(g_raw, A_log, dt_bias, gate, lb)
    got = g.cpu().to(f64)
    assert torch.isfinite(got).all()
    H, K = g_raw.shape[-2:]
    x = g_raw.to(f64) + dt_bias.to(f64).view(H, K)
    z = x * A_log.to(f64).exp()[:, None] if gate == "safe" else x
    err = (got - ref).abs()
    tiny = ref.abs() < 1e-30
    assert (err[tiny] < 1e-30).all()
    return (err[~tiny] / ref.abs()[~tiny] / (1 + z.abs()[~tiny])).max().item()


@pytest.mark.parametrize("gate,lb", [("unbounded", None), ("safe", -5.0), ("safe", -8.0)])
@pytest.mark.parametrize("shape,H,K", [((7,), 3, 20), ((2, 5), 2, 36), ((1,), 1, 1), ((33,), 2, 130)])
def test_gate_matches_float64(gate, lb, shape, H, K):
    g_raw, A_log, dt_bias = inputs(shape, H, K, seed=K + H)
    g = kda_gate(g_raw.to(DEVICE), A_log.to(DEVICE), dt_bias.to(DEVICE), gate, lb if lb is not None else -5.0)
    assert g.dtype == torch.float32 and g.shape == g_raw.shape
    # float32 transcendental math: a few ulp, also where softplus is tiny (the log1p path)
    assert max_error(g, g_raw, A_log, dt_bias, gate, lb if lb is not None else -5.0) < 1e-6
    assert (g <= 0).all()
    if lb is not None:
        assert (g >= lb).all()


def test_unbounded_extremes():
    """softplus at both ends: x far below 0 (exp(x) tiny: log(1 + y) alone loses all relative accuracy),
    x around the x > 20 switch, x large; dt_bias shifts x per channel; fp32 g_raw."""
    x = torch.tensor([-80.0, -40.0, -17.0, -1e-3, 0.0, 3.0, 19.99, 20.0, 20.01, 60.0, 300.0])
    g_raw = x.view(-1, 1, 1).repeat(1, 2, 3)
    A_log = torch.tensor([0.0, 1.5])
    dt_bias = torch.tensor([[0.0, 0.5, -0.5], [0.0, 0.0, 0.0]])
    g = kda_gate(g_raw.to(DEVICE), A_log.to(DEVICE), dt_bias.to(DEVICE), "unbounded")
    assert max_error(g, g_raw, A_log, dt_bias, "unbounded") < 1e-6


def test_float64_stays_float64():
    g_raw, A_log, dt_bias = inputs((5,), 2, 12, seed=3, dtype=f64)
    g = kda_gate(g_raw.to(DEVICE), A_log.to(f64).to(DEVICE), dt_bias.to(f64).to(DEVICE), "safe", -5.0)
    assert g.dtype == f64
    ref = ref_gate(g_raw, A_log.to(f64), dt_bias.to(f64), "safe", -5.0)
    assert (g.cpu() - ref).abs().max().item() < 1e-13


def test_bad_shapes_are_named():
    g_raw, A_log, dt_bias = inputs((4,), 2, 8, seed=0)
    with pytest.raises(ValueError, match="A_log"):
        kda_gate(g_raw, A_log[:1], dt_bias)
    with pytest.raises(ValueError, match="dt_bias"):
        kda_gate(g_raw, A_log, dt_bias[:, :4])
    with pytest.raises(ValueError, match="gate"):
        kda_gate(g_raw, A_log, dt_bias, "precomputed")


def test_adapter_reads_tags():
    """The gate kind and bound come from the tags; missing or contradictory tags are refused with a reason."""
    assert gate_options(FakeDefinition("kda_gate_x", ["stage:gate", "gate:safe", "lower_bound:-3"])) == ("safe", -3.0)
    assert gate_options(FakeDefinition("kda_gate_y", ["stage:gate", "gate:unbounded"]))[0] == "unbounded"
    assert "lower_bound" in supports(FakeDefinition("kda_gate_z", ["stage:gate", "gate:safe"]))
    assert "gate:" in supports(FakeDefinition("kda_gate_w", ["stage:gate"]))
    run = build_gate(FakeDefinition("kda_gate_x", ["stage:gate", "gate:safe", "lower_bound:-3"]))
    g_raw, A_log, dt_bias = inputs((3,), 2, 5, seed=9)
    g = run(g_raw.to(DEVICE), A_log.to(DEVICE), dt_bias.to(DEVICE)).cpu()
    assert (g.to(f64) - ref_gate(g_raw, A_log, dt_bias, "safe", -3.0)).abs().max().item() < 1e-6
