"""The ground truths agree with each other (hypothesis over small random shapes and options), so a
reference that matches one of them matches the operator, not an artefact of one formulation."""

from __future__ import annotations

import ground_truth as gt
import pytest
import torch
import torch.nn.functional as F
from conftest import FLA_FP32_RMS, TRUTH_AGREEMENT, require_cuda
from hypothesis import given, settings
from hypothesis import strategies as st

f64 = torch.float64


def random_problem(seed, lens, H, group, K, V, h0, gate_scale, dense_batch=False, device="cpu"):
    """A float64 Problem: packed sequences of the given lengths (or a dense batch of equal lengths)."""
    gen = torch.Generator().manual_seed(seed)
    B, T = (len(lens), lens[0]) if dense_batch else (1, sum(lens))
    HV = H * group

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=f64).to(device)

    q, k = randn(B, T, H, K), gt.l2_normalize(randn(B, T, H, K))
    g = F.logsigmoid(randn(B, T, HV, K)) * gate_scale
    beta = torch.rand(B, T, HV, generator=gen, dtype=f64).to(device)
    N = len(lens)
    cu = None if dense_batch else [0] + torch.tensor(lens).cumsum(0).tolist()
    return gt.Problem(q=q, k=k, v=randn(B, T, HV, V), g=g, beta=beta, scale=K ** -0.5,
                      h0=randn(N, HV, K, V) if h0 else None, cu_seqlens=cu)


def max_rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


problems = st.builds(
    dict, seed=st.integers(0, 2**31 - 1), lens=st.lists(st.integers(1, 24), min_size=1, max_size=3),
    H=st.integers(1, 2), group=st.sampled_from([1, 2]), K=st.sampled_from([3, 8, 16]), V=st.sampled_from([5, 8, 32]),
    h0=st.booleans(), gate_scale=st.sampled_from([0.01, 1.0, 20.0]), dense_batch=st.booleans())


@settings(max_examples=15, deadline=None)
@given(problem=problems, chunk=st.sampled_from([1, 3, 16, 64]))
def test_chunked_matches_fla_naive_float64(problem, chunk):
    """Our chunked form and fla's recurrence in float64 agree to TRUTH_AGREEMENT (1e-10; measured ~1e-15) for any chunk size, GVA, K != V,
    packed or dense batches, strong gates (20x logsigmoid), with or without initial states."""
    if problem["dense_batch"]:
        problem["lens"] = [problem["lens"][0]] * len(problem["lens"])
    p = random_problem(**problem)
    o1, s1 = gt.fla_recurrent(p)
    o2, s2 = gt.chunked(p, chunk=chunk)
    assert o1.dtype == f64 and s1.dtype == f64
    assert max_rel(o2, o1) < TRUTH_AGREEMENT and max_rel(s2, s1) < TRUTH_AGREEMENT, (max_rel(o2, o1), max_rel(s2, s1))


def test_fla_naive_really_runs_in_float64():
    """The float64 run of fla's function differs from fla's own float32 run by float32 rounding, and
    agrees with the chunked float64 form far below it (so the float64 substitution took effect)."""
    from fla.ops.kda.naive import naive_recurrent_kda

    p = random_problem(seed=1, lens=[33], H=2, group=2, K=16, V=8, h0=True, gate_scale=1.0)
    o64, _ = gt.fla_recurrent(p)
    o32, _ = naive_recurrent_kda(p.q.float(), p.k.float(), p.v.float(), p.g.float(), p.beta.float(), p.scale,
                                   p.h0.float(), output_final_state=True)
    oc, _ = gt.chunked(p)
    assert o32.dtype == torch.float32
    assert 1e-9 < max_rel(o32.to(f64), o64) < 1e-5
    assert max_rel(oc, o64) < TRUTH_AGREEMENT


def test_state_passes_between_sequences_never():
    """In a packed batch each sequence starts from its own initial state: the result of a sequence is
    the same alone and packed with others."""
    p = random_problem(seed=2, lens=[5, 9, 1], H=1, group=1, K=8, V=8, h0=True, gate_scale=1.0)
    o, s = gt.chunked(p, chunk=4)
    alone = gt.Problem(q=p.q[:, 5:14], k=p.k[:, 5:14], v=p.v[:, 5:14], g=p.g[:, 5:14], beta=p.beta[:, 5:14],
                       scale=p.scale, h0=p.h0[1:2], cu_seqlens=[0, 9])
    o1, s1 = gt.fla_recurrent(alone)
    assert max_rel(o[:, 5:14], o1) < TRUTH_AGREEMENT and max_rel(s[1:2], s1) < TRUTH_AGREEMENT


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), loc=st.floats(-60, 60), lower_bound=st.sampled_from([None, -5.0, -1.0]))
def test_gate_matches_fla_gate(seed, loc, lower_bound):
    """Our float64 gate and fla's naive gates (float32 inside) agree to float32 precision."""
    gen = torch.Generator().manual_seed(seed)
    g_raw = torch.randn(3, 4, 8, generator=gen) * 3 + loc
    A_log, dt_bias = torch.rand(4, generator=gen) * 3, torch.randn(4, 8, generator=gen)
    ours, fla = gt.gate(g_raw, A_log, dt_bias, lower_bound), gt.fla_gate(g_raw, A_log, dt_bias, lower_bound)
    assert torch.allclose(fla, ours, rtol=1e-5, atol=1e-6), float((fla - ours).abs().max())


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["chunk", "recurrent"])
@pytest.mark.parametrize("gate,layout,varlen", [("unbounded", "kv", True), ("safe", "vk", True),
                                                 ("precomputed", "kv", False), ("safe", "vk", False)])
def test_fla_triton_matches_chunked(kernel, gate, layout, varlen):
    """fla's Triton kernels on float32 inputs, with their in-kernel gate, beta sigmoid, L2 norm and state
    layout, against our float64 chunked form. fused_recurrent_kda computes in float32 throughout
    (RMS-relative bound 1e-5); chunk_kda's tensor-core products use tf32 (bound 5e-3)."""
    require_cuda()
    gen = torch.Generator().manual_seed(7)
    lens, H, group, K, V = ([100, 1, 300, 17] if varlen else [160, 160]), 2, 2, 64, 32
    HV = H * group
    B, T = (1, sum(lens)) if varlen else (len(lens), lens[0])
    q, k, v = (torch.randn(B, T, h, d, generator=gen) for h, d in ((H, K), (H, K), (HV, V)))
    g_raw = torch.randn(B, T, HV, K, generator=gen)
    A_log, dt_bias = torch.rand(HV, generator=gen), torch.randn(HV, K, generator=gen)
    b = torch.randn(B, T, HV, generator=gen)
    h0 = torch.randn(len(lens), HV, K, V, generator=gen) * 0.2
    lb = -5.0 if gate == "safe" else None
    g = F.logsigmoid(g_raw) if gate == "precomputed" else gt.gate(g_raw, A_log, dt_bias, lb)
    cu = [0] + torch.tensor(lens).cumsum(0).tolist() if varlen else None
    p = gt.Problem(q=gt.l2_normalize(q), k=gt.l2_normalize(k), v=v.to(f64), g=g.to(f64), beta=gt.sigmoid(b),
                   scale=K ** -0.5, h0=h0.to(f64), cu_seqlens=cu)
    o_ref, s_ref = gt.chunked(p)
    in_gate = gate != "precomputed"
    call = gt.RawCall(q=q.cuda(), k=k.cuda(), v=v.cuda(), g=(g_raw if in_gate else g).float().cuda(),
                      beta=b.cuda(), scale=K ** -0.5, h0=gt.state_from_kv(h0, layout).contiguous().cuda(),
                      cu_seqlens=None if cu is None else torch.tensor(cu, device="cuda"),
                      A_log=A_log.cuda() if in_gate else None, dt_bias=dt_bias.cuda() if in_gate else None,
                      lower_bound=lb, beta_logits=True, qk_l2norm=True, layout=layout)
    o, s = gt.fla_triton(call, kernel)
    s = gt.state_to_kv(s, layout)
    bound = FLA_FP32_RMS[kernel]

    def rms(a, b):
        return float((a.double().cpu() - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt())

    assert rms(o, o_ref) < bound and rms(s, s_ref) < bound, (rms(o, o_ref), rms(s, s_ref))
