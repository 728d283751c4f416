"""The matrix-form local kernel of the backward (kernels/backward.py `_local_matrix_kernel`, LAUNCH["local"] =
"matrix") against float64 autograd through the independent recurrence, under the Triton interpreter on tiny
shapes, with test_backward.py's cases and bars (fp32 compute: RMS-relative 1e-5; float64: 1e-12): odd K and V,
K != V, single-token sequences, packed varlen, GVA, gates to -8 and to -40 per step, h0 / dht absent, [V, K]
states, persistent programs looping over several chunks, and training through kernels/autograd.py's in-kernel
options. Its formulas: tests/kernels/chunk_backward_matrix.py (checked there against autograd)."""

from __future__ import annotations

import pytest
import torch

from test_backward import check, f64, make

from kda_trace.kernels import backward
from kda_trace.kernels.options import KDAOptions


@pytest.fixture(autouse=True)
def matrix_local(monkeypatch):
    monkeypatch.setitem(backward.LAUNCH, "local", "matrix")


def test_dense_odd_dims_two_chunks():
    """B = 2 rows of 70 tokens (a full chunk and a 6-token one), K = 20, V = 36."""
    check(make(2, 70, 1, 1, 20, 36, seed=1))


def test_packed_varlen_gva_single_tokens_few_programs(monkeypatch):
    """Packed [1, 64, 17, 1, 30] tokens, GVA 1 -> 2 heads, K = 12, V = 20, no dht; 3 persistent programs for
    12 (chunk, value head) items, each reusing its scratch."""
    monkeypatch.setitem(backward.LAUNCH, "programs", 3)
    x = make(1, 113, 1, 2, 12, 20, seed=2, n_seqs=5)
    check(x, cu_seqlens=torch.tensor([0, 1, 65, 82, 83, 113]), use_dht=False)


@pytest.mark.parametrize("g_low", [-8.0, -40.0])
def test_strong_gates_vk_layout_no_initial_state(g_low):
    """g uniform in [g_low, 0] per step (the chunk's G reaches about 32 g_low: e(-G) would overflow fp32 far
    below that), K = 16, V = 24, [V, K] states; without h0 at -8, with it at -40."""
    x = make(1, 80, 1, 1, 16, 24, seed=3, g_low=g_low)
    if g_low == -8.0:
        check(x, KDAOptions(state_layout="vk"), use_h0=False)
    else:
        check(x, KDAOptions(state_layout="vk", scale=0.7))


def test_single_token():
    check(make(3, 1, 1, 1, 8, 5, seed=4))


def test_float64_inputs():
    check(make(1, 80, 1, 2, 6, 7, seed=14, dtype=f64, n_seqs=2), cu_seqlens=torch.tensor([0, 79, 80]), bar=1e-12)


def test_rejects_an_unknown_local_variant(monkeypatch):
    monkeypatch.setitem(backward.LAUNCH, "local", "matrx")
    x = make(1, 3, 1, 1, 4, 4, seed=7)
    with pytest.raises(ValueError, match="LAUNCH\\['local'\\]"):
        backward.kda_backward(x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"])


@pytest.mark.parametrize("gate", ["unbounded", "safe"])
def test_training_through_in_kernel_options(gate):
    """kernels/autograd.py's training path (L2 norm, gate from g_raw / A_log / dt_bias, beta logits) with the
    matrix local kernel: test_autograd.py's fp32-against-float64 check."""
    from test_autograd import test_training_gradients_fp32_against_float64

    test_training_gradients_fp32_against_float64(gate)
