"""kernels/autograd.kda_autograd: torch.autograd.gradcheck in float64 under the Triton interpreter (finite
differences of our exact forward against our backward kernel), and fp32 training gradients, including the
raw-gate, L2-norm and beta-logit options, against float64 autograd through the independent recurrence of
kernel_ground_truth (ref_kda, ref_gate, ref_beta)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from kda_trace.platform import default_device, ensure_triton_can_run, triton_interpreted

DEVICE = default_device()
ensure_triton_can_run(DEVICE)

from kda_trace.kernels.autograd import kda_autograd

from kernel_ground_truth import ref_beta, ref_gate, ref_kda, rms_rel
from launch_spy import LaunchSpy
from nan_memory import nan_filled_empty

f64 = torch.float64


def leaves(B, T, H, HV, K, V, N, seed, dtype, raw=False):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=f64)
    x = dict(q=r(B, T, H, K), k=r(B, T, H, K), v=r(B, T, HV, V), h0=r(N, HV, K, V) * 0.3)
    if raw:  # raw gate, its parameters and beta logits
        x.update(g=r(B, T, HV, K), A_log=r(HV) * 0.5, dt_bias=r(HV, K), beta=r(B, T, HV))
    else:  # unit q/k, a log decay in about [-2, 0], beta in (0, 1)
        x["q"], x["k"] = x["q"] / x["q"].norm(dim=-1, keepdim=True), x["k"] / x["k"].norm(dim=-1, keepdim=True)
        x.update(g=-torch.rand(B, T, HV, K, generator=gen, dtype=f64) * 2,
                 beta=torch.rand(B, T, HV, generator=gen, dtype=f64))
    return {n: t.to(dtype).to(DEVICE).requires_grad_() for n, t in x.items()}


def test_gradcheck_dense_gva_float64():
    """Two rows of 3 tokens, GVA 1 -> 2 heads; fast_mode (random projections of the Jacobian): the full
    Jacobian costs 264 interpreted forwards here."""
    x = leaves(2, 3, 1, 2, 3, 2, 2, seed=0, dtype=f64)

    def f(q, k, v, g, beta, h0):
        return kda_autograd(q, k, v, g, beta, initial_state=h0)

    assert torch.autograd.gradcheck(f, tuple(x[n] for n in ("q", "k", "v", "g", "beta", "h0")), eps=1e-6, fast_mode=True,
                                    atol=1e-7, rtol=1e-5)


@pytest.mark.slow
def test_gradcheck_varlen_in_kernel_options_float64():
    """Packed [1, 3] tokens, L2 norm, safe gate from g_raw / A_log / dt_bias, beta from logits, [V, K] state."""
    x = leaves(1, 4, 1, 1, 3, 2, 2, seed=1, dtype=f64, raw=True)
    cu = torch.tensor([0, 1, 4], device=DEVICE)
    h0 = x["h0"].detach().transpose(-1, -2).contiguous().requires_grad_()

    def f(q, k, v, g, A_log, dt_bias, b, h0):
        return kda_autograd(q, k, v, g, b, initial_state=h0, cu_seqlens=cu, use_qk_l2norm=True, gate="safe",
                            A_log=A_log, dt_bias=dt_bias, lower_bound=-5.0, beta_kind="logits", state_layout="vk")

    args = tuple(x[n] for n in ("q", "k", "v", "g", "A_log", "dt_bias", "beta")) + (h0,)
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("gate", ["unbounded", pytest.param("safe", marks=pytest.mark.slow)])
def test_training_gradients_fp32_against_float64(gate):
    """fp32 leaves through the chunked forward and our backward; every leaf's gradient (raw q and k, v, g_raw,
    A_log, dt_bias, beta logits, h0) against float64 autograd through the plain recurrence. Under the interpreter
    the backward is the exact mode in fp32, so the bar is 1e-4 RMS-relative (dA_log sums T * K products); on a GPU
    the chunked mode's tf32 / bf16 products, 5e-3, but 1e-2 for dA_log: a sum of T * K signed terms dg * g, whose
    cancellation multiplies the terms' relative error (H100, unbounded gate: dA_log 7.1e-3 with every other
    gradient near 1.3e-3). The forward's o is bf16-grade."""
    B, T, H, HV, K, V = 1, 70, 1, 2, 12, 10
    x = leaves(B, T, H, HV, K, V, 1, seed=2, dtype=torch.float32, raw=True)
    do = torch.randn(B, T, HV, V, dtype=f64) * 0.1
    dht = torch.randn(1, HV, K, V, dtype=f64) * 0.1
    o, ht = kda_autograd(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"], use_qk_l2norm=True,
                         gate=gate, A_log=x["A_log"], dt_bias=x["dt_bias"], beta_kind="logits")
    ((o.double().cpu() * do).sum() + (ht.double().cpu() * dht).sum()).backward()

    ref = {n: t.detach().cpu().to(f64).requires_grad_() for n, t in x.items()}
    g = ref_gate(ref["g"], ref["A_log"], ref["dt_bias"], gate)
    o_ref, h_ref = ref_kda(ref["q"], ref["k"], ref["v"], g, ref_beta(ref["beta"], "logits"), K ** -0.5,
                           ref["h0"], l2norm=True)
    ((o_ref * do).sum() + (h_ref * dht).sum()).backward()
    assert rms_rel(o, o_ref) < 5e-3 and rms_rel(ht, h_ref) < 5e-3
    for n in x:
        bar = 1e-4 if triton_interpreted() else 1e-2 if n == "A_log" else 5e-3
        assert rms_rel(x[n].grad, ref[n].grad) < bar, (n, rms_rel(x[n].grad, ref[n].grad))


@pytest.mark.parametrize("gate,layout", [("safe", "vk"), ("unbounded", "kv")])
@pytest.mark.slow
def test_backward_raw_head_groups_give_the_same_gradients(gate, layout, monkeypatch):
    """kda_backward_raw by groups of heads (a workspace limit of one byte: one q/k head and its two value heads
    at a time), the element-wise norm / gate / sigmoid included, against all heads at once: within 1e-6 of the
    largest (the kernels' part is bit-identical, test_backward_chunked; torch's CPU reductions in the L2 norm's
    gradient change order with the tensor's size: 1.5e-8 on dq measured), dt_bias given flat [HV * K]; packed [3, 40] tokens, h0 and dht, GVA 3 -> 6 heads; every head of the
    per-head gradients written."""
    from kda_trace.kernels import backward
    from kda_trace.kernels.autograd import kda_backward_raw
    from kda_trace.kernels.options import KDAOptions

    x = {n: t.detach().float() for n, t in leaves(1, 43, 3, 6, 8, 12, 2, seed=31, dtype=f64, raw=True).items()}
    gen = torch.Generator().manual_seed(32)
    do = torch.randn(1, 43, 6, 12, generator=gen).to(DEVICE)
    h0, dht = x["h0"], torch.randn(2, 6, 8, 12, generator=gen).to(DEVICE)
    if layout == "vk":
        h0, dht = h0.transpose(-1, -2).contiguous(), dht.transpose(-1, -2).contiguous()
    opts = KDAOptions(use_qk_l2norm=True, gate=gate, beta="logits", state_layout=layout)
    cu = torch.tensor([0, 3, 43], device=DEVICE)

    def grads():
        return kda_backward_raw(x["q"], x["k"], x["v"], x["g"], x["beta"], do, dht, opts, A_log=x["A_log"],
                                dt_bias=x["dt_bias"].reshape(-1), initial_state=h0, cu_seqlens=cu)

    whole = grads()
    monkeypatch.setitem(backward.LAUNCH, "workspace_bytes", 1)
    assert len(backward.head_groups((1, 43, 3, 6, 8, 12, 2), 2, torch.float32, torch.device(DEVICE))) == 3
    grouped = grads()
    assert set(whole) == set(grouped)
    for n in whole:
        assert grouped[n].shape == whole[n].shape and grouped[n].dtype == whole[n].dtype, n
        assert (grouped[n] - whole[n]).abs().max() <= 1e-6 * whole[n].abs().max(), n
    assert (grouped["A_log"] != 0).all() and (grouped["dt_bias"] != 0).all()  # every head's group wrote its part
    assert (grouped["initial_state"].flatten(2) != 0).any(-1).all()


@pytest.mark.slow
def test_kept_chunk_matrices_give_the_same_gradients(monkeypatch):
    """kda_autograd keeps the forward's chunk matrices (P, A_qk, X) for the backward's chunked mode, which then
    launches neither its pairs nor its solve kernel: every leaf's gradient within 1e-5 of the recomputing
    backward's under the interpreter (fp32 products in both), within 2e-3 on a GPU (the forward's pair products
    are tf32, the backward's pairs bf16 on their diagonal blocks: dq 1.7e-4 apart on the H100), for the
    safe gate, L2 norm and beta logits on packed
    [5, 145] tokens, GVA 2 -> 4, odd K and V; the same again by groups of heads (a workspace limit of one byte:
    the kept matrices are split by value heads too). The kept run hands out NaN-filled memory from torch.empty,
    so a kernel of either pass that reads what no kernel wrote (such as the blocks of a kept matrix above its
    diagonal blocks) fails it."""
    from kda_trace.kernels import backward, backward_chunked

    monkeypatch.setitem(backward.LAUNCH, "mode", "chunked")
    x = leaves(1, 150, 2, 4, 20, 12, 2, seed=41, dtype=torch.float32, raw=True)
    cu = torch.tensor([0, 5, 150], device=DEVICE)
    gen = torch.Generator().manual_seed(42)
    do = torch.randn(1, 150, 4, 12, generator=gen).to(DEVICE)
    dht = torch.randn(2, 4, 20, 12, generator=gen).to(DEVICE)
    pairs = LaunchSpy(backward_chunked._prep_pairs_kernel)
    monkeypatch.setattr(backward_chunked, "_prep_pairs_kernel", pairs)

    solves = LaunchSpy(backward_chunked._prep_solve_kernel)
    monkeypatch.setattr(backward_chunked, "_prep_solve_kernel", solves)

    def grads(keep):
        for t in x.values():
            t.grad = None
        with nan_filled_empty() if keep else contextlib.nullcontext():
            o, ht = kda_autograd(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"], cu_seqlens=cu,
                                 use_qk_l2norm=True, gate="safe", A_log=x["A_log"], dt_bias=x["dt_bias"],
                                 lower_bound=-4.0, beta_kind="logits", keep_chunk_matrices=keep)
            torch.autograd.backward((o, ht), (do.to(o.dtype), dht))
        return {n: t.grad.clone() for n, t in x.items()}

    base = grads(False)
    assert len(pairs.calls) == 4 and len(solves.calls) == 1  # one launch per 16-row block; one solve
    kept = grads(True)
    assert len(pairs.calls) == 4 and len(solves.calls) == 1  # none more
    bar = 1e-5 if triton_interpreted() else 2e-3
    for n in base:
        assert rms_rel(kept[n], base[n]) < bar, (n, rms_rel(kept[n], base[n]))
    monkeypatch.setitem(backward.LAUNCH, "workspace_bytes", 1)
    grouped = grads(True)
    assert len(pairs.calls) == 4
    # not bit-identical by groups (the mechanism not tracked down): dg moves by 7e-7 to 1e-6 RMS-relative, fp32
    # rounding's scale, and the A_log and dt_bias gradients, sums of it, by up to 1.3e-6 with the forward's diagonal
    # blocks at one anchor (the safe gate's bound here), 4.5e-7 with two
    for n in base:
        assert rms_rel(grouped[n], kept[n]) < 3e-6, (n, rms_rel(grouped[n], kept[n]))


@pytest.mark.parametrize("pass_precision", [None, "bf16"])
@pytest.mark.slow
def test_kept_states_give_the_gradients(pass_precision, monkeypatch):
    """LAUNCH["keep_states"] (the default): with bf16 inputs the forward keeps its chunk-start states and V_new
    (fp32, V_new before its bf16 rounding, from a U in tf32), and the backward's pass runs only its reverse
    recursion (one program per (sequence, V-tile, head)) and computes no U; where the pass rounds W and
    k exp(G_last - G) to bf16 (the GPU's default for bf16 dO; under the interpreter with pass_precision "bf16")
    it takes the forward's bf16 W (from X in tf32) and k exp(G_last - G) and computes neither (a tf32 pass
    computes its own in fp32): every leaf's gradient at the bf16 bar
    against float64 autograd through the plain recurrence, as accurate as the recomputing backward's (within 25% +
    1e-4 of its error, and within 1e-3 of it: U rounded to bf16 in the forward fails both, at 37x dA_log's error
    and 3e-3 apart), and the same again by groups of heads (the kept tensors split by value heads). Safe gate, L2
    norm, beta logits, packed [5, 145] tokens, GVA 2 -> 4, odd K and V = 12 (on the H100 this test found the
    forward wrong at V <= 16: kernels/chunk.py `_wu_warps`)."""
    from kda_trace.kernels import backward, backward_chunked

    monkeypatch.setitem(backward.LAUNCH, "mode", "chunked")
    monkeypatch.setitem(backward.LAUNCH, "chunked_pass_precision", pass_precision)
    B, T, H, HV, K, V = 1, 150, 2, 4, 20, 12
    x = leaves(B, T, H, HV, K, V, 2, seed=45, dtype=torch.float32, raw=True)
    x = {n: (t.detach().bfloat16() if n in ("q", "k", "v") else t.detach()).requires_grad_() for n, t in x.items()}
    cu = torch.tensor([0, 5, 150], device=DEVICE)
    gen = torch.Generator().manual_seed(46)
    do = (torch.randn(B, T, HV, V, generator=gen, dtype=f64) * 0.1).to(DEVICE)
    dht = (torch.randn(2, HV, K, V, generator=gen, dtype=f64) * 0.1).to(DEVICE)
    passes = LaunchSpy(backward_chunked._state_pass_kernel)
    operands = LaunchSpy(backward_chunked._prep_operands_kernel)
    monkeypatch.setattr(backward_chunked, "_state_pass_kernel", passes)
    monkeypatch.setattr(backward_chunked, "_prep_operands_kernel", operands)

    def grads():
        for t in x.values():
            t.grad = None
        o, ht = kda_autograd(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"], cu_seqlens=cu,
                             use_qk_l2norm=True, gate="safe", A_log=x["A_log"], dt_bias=x["dt_bias"],
                             lower_bound=-4.0, beta_kind="logits")
        torch.autograd.backward((o, ht), (do.to(o.dtype), dht.float()))
        return {n: t.grad.clone() for n, t in x.items()}

    assert backward.LAUNCH["keep_states"]  # on by default (benchmarks/RESULTS.md)
    monkeypatch.setitem(backward.LAUNCH, "keep_states", False)
    base = grads()
    assert passes.options[-1]["FORWARD"] and operands.options[-1]["WITH_U"] and operands.options[-1]["WITH_WK"]
    monkeypatch.setitem(backward.LAUNCH, "keep_states", True)
    kept = grads()
    assert not passes.options[-1]["FORWARD"] and not operands.options[-1]["WITH_U"]
    bf16_pass = pass_precision == "bf16" or not triton_interpreted()
    assert operands.options[-1]["WITH_WK"] != bf16_pass
    assert passes.grids[-1][2] == 1  # the reverse recursion's programs only

    ref = {n: t.detach().cpu().to(f64).requires_grad_() for n, t in x.items()}
    g = ref_gate(ref["g"], ref["A_log"], ref["dt_bias"], "safe", -4.0)
    o_ref, h_ref = ref_kda(ref["q"], ref["k"], ref["v"], g, ref_beta(ref["beta"], "logits"), K ** -0.5,
                           ref["h0"], cu_seqlens=cu.cpu(), l2norm=True)
    ((o_ref * do.cpu()).sum() + (h_ref * dht.cpu()).sum()).backward()
    for n in x:
        err, base_err = rms_rel(kept[n], ref[n].grad), rms_rel(base[n], ref[n].grad)
        assert err < 2e-2 and err <= 1.25 * base_err + 1e-4, (n, err, base_err)
        assert rms_rel(kept[n], base[n]) < 1e-3, (n, rms_rel(kept[n], base[n]))
    monkeypatch.setitem(backward.LAUNCH, "workspace_bytes", 1)
    grouped = grads()
    for n in x:
        assert rms_rel(grouped[n], kept[n]) < 1e-3, (n, rms_rel(grouped[n], kept[n]))


@pytest.mark.parametrize("gate,bf16", [("safe", False), ("unbounded", True)])
@pytest.mark.slow
def test_qk_norm_factors_give_the_same_gradients(gate, bf16, monkeypatch):
    """LAUNCH["qk_norm_factors"]: the chunked backward reads q and k as given with their rows' L2-norm factors
    (`kda_backward(qk_norms=...)`) instead of fp32 normalised copies: the factor path taken (the prep operands, 3a,
    the sums and 3c launched with NORM, no copy made; the factors the forward kept, not recomputed, and the same
    gradients where they are recomputed), every leaf's gradient within 1e-6 of the copies' (the same
    products; fp32 roundings in another order at most), and against float64 autograd through the plain
    recurrence at the usual bars; by groups of heads too (the factors split by q/k heads); without the kept chunk
    matrices (the pairs kernel reads normalised copies) the copies are made and the gradients are the same. Packed
    [5, 145] tokens, GVA 2 -> 4, K = 20 (K-tiles of 16 in 3c and the sums), V = 12; bf16 q, k, v for one case
    (dq, dk then in fp32 from the core, rounded only after the L2 norm's chain rule; there the bf16 gradients may
    differ by a rounding flip, 2^-8 of an element, where the fp32 ones differ by an ulp: their bar 1e-3)."""
    from kda_trace.kernels import backward, backward_chunked, chunk, option_grads

    monkeypatch.setitem(backward.LAUNCH, "mode", "chunked")
    monkeypatch.setitem(backward.LAUNCH, "split_k_bk", 16)
    monkeypatch.setitem(backward.LAUNCH, "sums_bk", 16)
    B, T, H, HV, K, V = 1, 150, 2, 4, 20, 12
    x = leaves(B, T, H, HV, K, V, 2, seed=43, dtype=torch.float32, raw=True)
    if bf16:
        x = {n: (t.detach().bfloat16() if n in ("q", "k", "v") else t.detach()).requires_grad_() for n, t in x.items()}
    cu = torch.tensor([0, 5, 150], device=DEVICE)
    gen = torch.Generator().manual_seed(44)
    do = (torch.randn(B, T, HV, V, generator=gen, dtype=f64) * 0.1).to(DEVICE)
    dht = (torch.randn(2, HV, K, V, generator=gen, dtype=f64) * 0.1).to(DEVICE)
    spies = {name: LaunchSpy(getattr(backward_chunked, name)) for name in
             ("_prep_operands_kernel", "_local_vk_kernel", "_local_sums_kernel", "_local_k_kernel")}
    for name, spy in spies.items():
        monkeypatch.setattr(backward_chunked, name, spy)
    copies, factor_calls = [], []
    real_copy, real_factors = option_grads.l2_normalize, option_grads.l2_factors
    monkeypatch.setattr(option_grads, "l2_normalize", lambda *a: copies.append(1) or real_copy(*a))
    monkeypatch.setattr(option_grads, "l2_factors", lambda *a: factor_calls.append(1) or real_factors(*a))

    def grads(keep=True):
        for t in x.values():
            t.grad = None
        o, ht = kda_autograd(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"], cu_seqlens=cu,
                             use_qk_l2norm=True, gate=gate, A_log=x["A_log"], dt_bias=x["dt_bias"],
                             beta_kind="logits", keep_chunk_matrices=keep)
        torch.autograd.backward((o, ht), (do.to(o.dtype), dht.float()))
        return {n: t.grad.clone() for n, t in x.items()}

    def same(n):  # the bar between two ways to the same gradient (see the docstring)
        if x[n].dtype == torch.bfloat16:
            return 1e-3
        # on a GPU the forward's kept factors (summed in another order than option_grads' kernel) differ from the
        # copies' by an ulp, which A_log's and dt_bias's sums over every token (with cancellation) amplify:
        # dt_bias 1.5e-6 on the H100
        return 1e-5 if n in ("A_log", "dt_bias") and not triton_interpreted() else 1e-6

    assert backward.LAUNCH["qk_norm_factors"]  # on by default
    monkeypatch.setitem(backward.LAUNCH, "qk_norm_factors", False)
    base = grads()
    assert len(copies) == 2 and all(not opt["NORM"] for spy in spies.values() for opt in spy.options)
    monkeypatch.setitem(backward.LAUNCH, "qk_norm_factors", True)
    for spy in spies.values():
        spy.options.clear()
    factors = grads()
    assert len(copies) == 2  # none more
    assert not factor_calls  # the forward's factors, kept with its chunk matrices
    assert all(spy.options and all(opt["NORM"] for opt in spy.options) for spy in spies.values())
    for n in base:
        assert factors[n].dtype == base[n].dtype, n
        assert rms_rel(factors[n], base[n]) < same(n), (n, rms_rel(factors[n], base[n]))
    real_chunk = chunk.kda_chunk

    def without_factors(*args, saved=None, **kwargs):
        out = real_chunk(*args, saved=saved, **kwargs)
        for name in ("rq", "rk"):
            (saved or {}).pop(name, None)
        return out

    with monkeypatch.context() as m:  # the factors not kept: recomputed by option_grads.l2_factors, the same grads
        m.setattr(chunk, "kda_chunk", without_factors)
        recomputed = grads()
    assert len(factor_calls) == 2
    for n in base:
        assert rms_rel(recomputed[n], factors[n]) < same(n), (n, rms_rel(recomputed[n], factors[n]))

    ref = {n: t.detach().cpu().to(f64).requires_grad_() for n, t in x.items()}
    g = ref_gate(ref["g"], ref["A_log"], ref["dt_bias"], gate)
    o_ref, h_ref = ref_kda(ref["q"], ref["k"], ref["v"], g, ref_beta(ref["beta"], "logits"), K ** -0.5,
                           ref["h0"], cu_seqlens=cu.cpu(), l2norm=True)
    ((o_ref * do.cpu()).sum() + (h_ref * dht.cpu()).sum()).backward()
    # on a GPU A_log's and dt_bias's gradients (sums of dg over every token, with cancellation) take 1e-2:
    # dt_bias 6.2e-3 on the H100 with fp32 inputs (tf32 products)
    wide = ("A_log", "dt_bias")
    errs = {n: rms_rel(factors[n], ref[n].grad) for n in x}
    for n in x:
        bar = (1e-4 if triton_interpreted() else 1e-2 if n in wide else 5e-3) if not bf16 else 2e-2
        assert errs[n] < bar, (n, errs)

    monkeypatch.setitem(backward.LAUNCH, "workspace_bytes", 1)
    grouped = grads()
    assert len(factor_calls) == 2  # the kept factors split by heads
    for n in base:
        assert rms_rel(grouped[n], factors[n]) < same(n), (n, rms_rel(grouped[n], factors[n]))
    monkeypatch.setitem(backward.LAUNCH, "workspace_bytes", None)
    unkept = grads(keep=False)
    assert len(copies) == 2  # made inside kda_backward, not by option_grads
    # with bf16 inputs the kept chunk-start states carry the forward's bf16 roundings, which the recomputing
    # pass under the interpreter does not (LAUNCH["keep_states"]; test_kept_states_give_the_gradients)
    for n in base:
        bar = 1e-5 if triton_interpreted() and not bf16 else 2e-3
        assert rms_rel(unkept[n], factors[n]) < bar, (n, rms_rel(unkept[n], factors[n]))


def test_chunk_matrices_kept_only_for_a_backward(monkeypatch):
    """kda_autograd asks the forward to keep its chunk matrices only when some input requires grad (a backward can
    follow), and only when keep_chunk_matrices is on."""
    from kda_trace.kernels import chunk

    asked = []
    real = chunk.kda_chunk

    def spy(*args, saved=None, **kwargs):
        asked.append(saved is not None)
        return real(*args, saved=saved, **kwargs)

    monkeypatch.setattr(chunk, "kda_chunk", spy)
    x = leaves(1, 20, 1, 1, 8, 8, 1, seed=43, dtype=torch.float32)
    plain = {n: t.detach() for n, t in x.items()}
    for inputs, keep in ((x, True), (plain, True), (x, False)):
        kda_autograd(inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"], initial_state=inputs["h0"],
                     keep_chunk_matrices=keep)
    assert asked == [True, False, False]
