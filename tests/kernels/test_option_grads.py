"""kernels/option_grads.py under the Triton interpreter: the L2 norm and its backward, and the gate's backward,
against PyTorch autograd through the plain formulas in float64 (kernel_ground_truth's ref_gate), on odd K, many
rows (more than one tile of rows: the partial sums of ddt_bias and dA_log are added across tiles) and the
softplus threshold."""

from __future__ import annotations

import pytest
import torch

from kda_trace.platform import default_device, ensure_triton_can_run

DEVICE = default_device()
ensure_triton_can_run(DEVICE)

from kda_trace.kernels import option_grads  # noqa: E402

from kernel_ground_truth import ref_gate, rms_rel  # noqa: E402

f64 = torch.float64


def _l2_ref(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("dtype,bar", [(f64, 1e-12), (torch.float32, 1e-6), (torch.bfloat16, 8e-3)])
def test_l2_normalize_and_its_backward(dtype, bar):
    """[3, 50, 2, 37] rows of K = 37 (two tiles of rows, a masked K-tile), one row of zeros (the 1e-6 keeps it
    finite), rows of very different norms."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 50, 2, 37, generator=gen, dtype=f64) * torch.rand(3, 50, 2, 1, generator=gen, dtype=f64) * 10
    x[1, 3, 0] = 0.0
    x = x.to(dtype)
    dy = torch.randn(x.shape, generator=gen, dtype=f64)
    x64 = x.to(f64).requires_grad_()
    y64 = _l2_ref(x64)
    (dx64,) = torch.autograd.grad(y64, x64, dy)
    acc = f64 if dtype == f64 else torch.float32
    y = option_grads.l2_normalize(x.to(DEVICE), acc)
    assert y.dtype == acc and rms_rel(y, y64) <= (1e-12 if dtype == f64 else 1e-6)
    r = option_grads.l2_factors(x.to(DEVICE), acc)  # the factors alone: the rows of y, bit for bit, as x r
    assert r.shape == x.shape[:-1] and r.dtype == acc
    assert torch.equal(x.to(DEVICE).to(acc) * r[..., None], y)
    assert rms_rel(r, 1.0 / torch.sqrt((x.to(f64) ** 2).sum(-1) + 1e-6)) <= (1e-12 if dtype == f64 else 1e-6)
    dx = option_grads.l2_normalize_backward(x.to(DEVICE), dy.to(acc).to(DEVICE))
    assert dx.dtype == dtype and dx.shape == x.shape
    assert rms_rel(dx, dx64) <= bar, rms_rel(dx, dx64)


@pytest.mark.parametrize("gate", ["unbounded", "safe"])
@pytest.mark.parametrize("dtype,bar", [(f64, 1e-12), (torch.float32, 1e-5)])
def test_gate_backward(gate, dtype, bar):
    """g_raw [2, 90, 3, 20] (180 rows: three tiles), dt_bias as [H * K], some inputs past softplus's threshold of
    20; dg_raw, dA_log and ddt_bias against autograd through ref_gate in float64."""
    gen = torch.Generator().manual_seed(1)
    g_raw = torch.randn(2, 90, 3, 20, generator=gen, dtype=f64) * 3
    g_raw[0, :5, 1, :4] = 25.0
    A_log = torch.randn(3, generator=gen, dtype=f64) * 0.5
    dt_bias = torch.randn(60, generator=gen, dtype=f64)
    dg = torch.randn(g_raw.shape, generator=gen, dtype=f64)
    leaves = [t.clone().requires_grad_() for t in (g_raw, A_log, dt_bias)]
    g64 = ref_gate(leaves[0], leaves[1], leaves[2].view(3, 20), gate, -5.0)
    want = torch.autograd.grad(g64, leaves, dg)
    got = option_grads.gate_backward(*(t.to(dtype).to(DEVICE) for t in (g_raw, A_log, dt_bias)),
                                     dg.to(f64 if dtype == f64 else torch.float32).to(DEVICE), gate, -5.0)
    for name, a, b, ref in zip(("g_raw", "A_log", "dt_bias"), got, want, (g_raw, A_log, dt_bias)):
        assert a.dtype == dtype and a.shape == ref.shape, name
        assert rms_rel(a, b) <= bar, (name, rms_rel(a, b))


def test_gate_backward_refuses_unknown_gate():
    with pytest.raises(ValueError, match="unbounded' or 'safe"):
        option_grads.gate_backward(torch.zeros(1, 1, 4), torch.zeros(1), torch.zeros(1, 4), torch.zeros(1, 1, 4),
                                   "linear")
