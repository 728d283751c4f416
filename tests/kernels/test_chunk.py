"""The chunked KDA kernel (kda_trace/kernels/chunk.py) against an independent float64 recurrence.

Runs under the Triton interpreter on CPU (tiny shapes: a few 64-token chunks, head dims 16-64, odd sizes).
The reference is a token-by-token loop written from KDA.md; `test_reference_agrees_with_fla_naive` checks it
once against fla's naive_recurrent_kda and naive gates, so the kernel is never judged against itself.

Error budget: the kernel keeps its intermediates (W, U, q exp(G), k exp(G_last - G), the per-chunk states,
V_new, A_qk) in bf16, as fla's chunk_kda does, so it is judged at RMS-relative <= 5e-3 on o and the final
state even for fp32 inputs (the brief's bar for bf16 inputs against an fp32 reference). A structural error
(wrong decay, wrong row, wrong sequence) costs O(1), far above that.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from kda_trace.platform import default_device, ensure_triton_can_run, triton_interpreted

DEVICE = default_device()
ensure_triton_can_run(DEVICE)  # before triton is imported: its own @jit helpers (tl.cumsum) are made then

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kda_trace.kernels.chunk import _pdot, kda_chunk
from kda_trace.kernels.options import KDAOptions

f64 = torch.float64
BUDGET = 5e-3


from kernel_ground_truth import FakeDefinition, load_reference, ref_beta, ref_gate, ref_kda, rms_rel
from nan_memory import nan_filled_empty


def make(B, T, H, HV, K, V, seed, dtype=torch.float32, gate="precomputed", n_seqs=None):
    """Random inputs: raw q/k (normalised unless the kernel does it), v, g (log decay or raw gate), beta."""
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)
    q, k, v = r(B, T, H, K), r(B, T, H, K), r(B, T, HV, V)
    g = F.logsigmoid(r(B, T, HV, K)) if gate == "precomputed" else r(B, T, HV, K) * 2
    beta = torch.rand(B, T, HV, generator=gen)
    h0 = r(n_seqs or B, HV, K, V)
    A_log, dt_bias = r(HV) * 0.5, r(HV, K)
    return {"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype), "g": g, "beta": beta.to(dtype), "h0": h0,
                "A_log": A_log, "dt_bias": dt_bias}


def run_case(x, opts, cu_seqlens=None, use_h0=True):
    """(o, final) of the kernel and (o, final) of the reference ([K, V] layout) for inputs `x`."""
    K = x["q"].shape[-1]
    h0 = x["h0"] if use_h0 else None
    h0_kernel = None if h0 is None else (h0.transpose(-1, -2).contiguous() if opts.state_layout == "vk" else h0)
    dv = lambda t: None if t is None else t.to(DEVICE)
    o, ht = kda_chunk(dv(x["q"]), dv(x["k"]), dv(x["v"]), dv(x["g"]), dv(x["beta"]), opts,
                      A_log=dv(x["A_log"]), dt_bias=dv(x["dt_bias"]), initial_state=dv(h0_kernel),
                      cu_seqlens=dv(cu_seqlens))
    g = ref_gate(x["g"], x["A_log"], x["dt_bias"], opts.gate, opts.lower_bound)
    beta = ref_beta(x["beta"], opts.beta)
    o_ref, h_ref = ref_kda(x["q"], x["k"], x["v"], g, beta, opts.resolved_scale(K), h0, cu_seqlens,
                           opts.use_qk_l2norm)
    if ht is not None and opts.state_layout == "vk":
        ht = ht.transpose(-1, -2)
    return o, ht, o_ref, h_ref


# ----------------------------------------------------------------------------------------------------------
def test_dense_two_batches_ragged_tail():
    """B = 2 dense sequences of 100 tokens (one full chunk and a partial one), initial state, final state
    ([K, V] layout; [V, K] is in the varlen test)."""
    x = make(2, 100, 1, 1, 32, 32, seed=1)
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    opts = KDAOptions(output_final_state=True)
    o, ht, o_ref, h_ref = run_case(x, opts)
    assert o.shape == o_ref.shape and o.dtype == x["v"].dtype
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET


# the default (LAUNCH["l2_in_intra"]) in the fast tier, the other in the slow one
@pytest.fixture(params=[pytest.param("gate kernel", marks=pytest.mark.slow), "intra kernel"])
def l2_where(request, monkeypatch):
    """Run a test with the L2-norm factors computed by either kernel (the launch setting l2_in_intra)."""
    from kda_trace.kernels import chunk

    monkeypatch.setitem(chunk.LAUNCH, "l2_in_intra", request.param == "intra kernel")
    return request.param


def test_varlen_gva_odd_dims_every_in_kernel_option(l2_where):
    """Packed lengths 1, 16, 83 and 20 (length one, shorter than a chunk, ragged tails), GVA (HV = 2 H),
    K = 48 and V = 40 (not powers of two), unbounded gate, beta logits, L2 norm, [V, K] state, no initial
    state, custom scale."""
    cu = torch.tensor([0, 1, 17, 100, 120])
    x = make(1, 120, 1, 2, 48, 40, seed=2, gate="unbounded", n_seqs=4)
    x["beta"] = torch.randn(x["beta"].shape, generator=torch.Generator().manual_seed(11)).to(x["beta"])
    opts = KDAOptions(scale=0.3, use_qk_l2norm=True, gate="unbounded", beta="logits", state_layout="vk",
                      output_final_state=True)
    o, ht, o_ref, h_ref = run_case(x, opts, cu_seqlens=cu, use_h0=False)
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET


@pytest.mark.slow
def test_wu_kernel_on_8_warps_where_v_fits_one_16_wide_tile(monkeypatch):
    """`_wu_kernel` runs on 8 warps where V <= 16 (kernels/chunk.py `_wu_warps`: at 4 warps Triton 3.6 miscompiled
    it on the H100 there, o 0.91 off float64 at K = 20, V = 12; the interpreter cannot show it) and on
    LAUNCH["wu_warps"] elsewhere; o against float64 at V = 12 and 17 (the launch's warps are this test's subject)."""
    from kda_trace.kernels import chunk
    from launch_spy import LaunchSpy

    spy = LaunchSpy(chunk._wu_kernel)
    monkeypatch.setattr(chunk, "_wu_kernel", spy)
    for V in (12, 17):
        x = make(1, 70, 1, 2, 20, V, seed=33)
        o, _, o_ref, _ = run_case(x, KDAOptions())
        assert rms_rel(o, o_ref) <= BUDGET
    assert [opt["num_warps"] for opt in spy.options] == [8, chunk.LAUNCH["wu_warps"]]


@pytest.mark.slow
def test_kg_in_intra_and_the_wu_register_cap_by_default(monkeypatch):
    """kg_in_intra=None (the default): the intra kernel writes the W/U operands (KG_HERE) unless it computes the
    q/k L2-norm factors itself, or the chunk matrices and states are kept (save_states: W/U computes W in tf32 from k
    and G). wu_maxnreg=None (the default): `_wu_kernel` launches with at most 168 registers only where it forms its
    bf16 operands from k and G (H200: 1.02x on K3; not where it reads the intra kernel's, nor with save_states). o
    against float64 either way (the same operations: the variants' test checks them bit for bit)."""
    from kda_trace.kernels import chunk
    from launch_spy import LaunchSpy

    assert chunk.LAUNCH["kg_in_intra"] is None and chunk.LAUNCH["wu_maxnreg"] is None
    intra, wu = LaunchSpy(chunk._intra_chunk_kernel), LaunchSpy(chunk._wu_kernel)
    monkeypatch.setattr(chunk, "_intra_chunk_kernel", intra)
    monkeypatch.setattr(chunk, "_wu_kernel", wu)
    x = make(1, 70, 1, 2, 20, 12, seed=34)
    for opts in (KDAOptions(), KDAOptions(use_qk_l2norm=True)):
        o, _, o_ref, _ = run_case(x, opts)
        assert rms_rel(o, o_ref) <= BUDGET
    args = [x[n].to(DEVICE) for n in ("q", "k", "v", "g", "beta")]
    kda_chunk(*args, KDAOptions(), saved={}, save_states=True)
    assert [opt["KG_HERE"] for opt in intra.options] == [True, False, False]
    assert [opt.get("maxnreg") for opt in wu.options] == [None, 168, None]


@pytest.mark.slow
def test_the_solve_register_cap_by_default_but_for_the_kept_matrices(monkeypatch):
    """solve_maxnreg=None (the default): `_solve_kernel` launches with at most 168 registers (H200: 1.006-1.010 on the
    six prefill shapes of benchmarks/RESULTS.md, the same bits), but not where the chunk matrices are kept for the backward (its tf32x3
    solve, not timed under a cap). o against float64 either way (the interpreter ignores the cap)."""
    from kda_trace.kernels import chunk
    from launch_spy import LaunchSpy

    assert chunk.LAUNCH["solve_maxnreg"] is None
    spy = LaunchSpy(chunk._solve_kernel)
    monkeypatch.setattr(chunk, "_solve_kernel", spy)
    x = make(1, 70, 1, 2, 20, 12, seed=36)
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    o, _, o_ref, _ = run_case(x, KDAOptions())
    assert rms_rel(o, o_ref) <= BUDGET
    args = [x[n].to(DEVICE) for n in ("q", "k", "v", "g", "beta")]
    kda_chunk(*args, KDAOptions(), saved={})
    with monkeypatch.context() as m:
        m.setitem(chunk.LAUNCH, "solve_maxnreg", 0)
        run_case(x, KDAOptions())
    assert [opt.get("maxnreg") for opt in spy.options] == [168, None, None]


@pytest.mark.slow
def test_solve_in_tf32_by_default_and_in_tf32x3_for_the_kept_matrices(monkeypatch):
    """The solve's products in tf32 by default, operands rounded to nearest first ("tf32_rn"; X is rounded to bf16
    after it), in tf32x3 (about fp32) when the chunk matrices are kept for the backward (its fp32 X). Under the
    interpreter the rounding is the same, so o here is tf32_rn's: within the float64 budget, and the kept X within
    tf32x3's reach of (I + A_kk)^-1 in float64 (1e-5 relative; tf32 products alone would miss it)."""
    from kda_trace.kernels import chunk
    from launch_spy import LaunchSpy

    spy = LaunchSpy(chunk._solve_kernel)
    monkeypatch.setattr(chunk, "_solve_kernel", spy)
    x = make(1, 130, 1, 2, 32, 16, seed=35)
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    x["g"] = x["g"] * 0.05  # weak decays: A_kk's entries near k_i . k_j, X far from the identity
    o, _, o_ref, _ = run_case(x, KDAOptions())
    assert rms_rel(o, o_ref) <= BUDGET
    saved = {}
    args = [x[n].to(DEVICE) for n in ("q", "k", "v", "g", "beta")]
    kda_chunk(*args, KDAOptions(), saved=saved)
    assert [(opt["PREC_INV"], opt["PREC_MERGE"], opt["PREC_POW"]) for opt in spy.options] == [
        ("tf32_rn", "tf32_rn", "tf32_rn"), ("tf32x3", "tf32x3", "tf32x3")]
    P, X = saved["P"].cpu().to(f64), saved["X"].cpu().to(f64)
    beta = x["beta"].to(f64).reshape(-1, 2)  # [tokens, value heads]
    for c, (r0, n) in enumerate(((0, 64), (64, 64), (128, 2))):
        for h in range(2):
            A = beta[r0:r0 + n, h, None] * P[c, h, :n, :n]
            X_ref = torch.linalg.inv(torch.eye(n, dtype=f64) + A)
            assert (X[c, h, :n, :n] - X_ref).abs().max() <= 1e-5 * X_ref.abs().max()


def _solve_x(P, beta, prec, peel):
    """X = (I + diag(beta) P)^-1 of full 64-row chunks by `_solve_kernel` (its fp32 output, beta as probabilities),
    every product in prec."""
    from kda_trace.kernels import chunk

    NT, HV, BT = P.shape[0], P.shape[1], P.shape[2]
    cu = torch.tensor([0, NT * BT], dtype=torch.int32, device=DEVICE)
    idx = torch.stack([torch.zeros(NT, dtype=torch.int32), torch.arange(NT, dtype=torch.int32)], 1).to(DEVICE)
    X = torch.empty_like(P)
    chunk._solve_kernel[(NT, HV)](P, beta, X, X, cu, idx, HV=HV, BT=BT, BC=16, BETA=chunk.BETA_CODES["prob"],
                                  INTERPRET=triton_interpreted(), SAVE=True, STORE_XS=False, PREC_INV=prec,
                                  PREC_MERGE=prec, PREC_POW=prec, PEEL=peel)
    return X


@pytest.mark.slow
def test_peeled_tf32_solve_stays_near_float64():
    """The solve's tf32 products against (I + A_kk)^-1 in float64, on weak decays (A_kk's entries near beta k_i . k_j,
    X furthest from the identity). Plain tf32 (operands truncated by the tensor cores) leaves X's error at half that
    of X's bf16 rounding after the solve; solve_peel (the identity kept out of the products: X (I + M) as
    I + N + M + N M) cuts it more than 3x, and the operands rounded to nearest first ("tf32_rn") 2x more, to under a
    tenth of the bf16 rounding (about 0.2% more X error after it, as tf32x3)."""
    gen = torch.Generator().manual_seed(41)
    NT, HV, BT, K = 3, 2, 64, 64
    k = F.normalize(torch.randn(NT, HV, BT, K, generator=gen, dtype=f64), dim=-1)
    G = (F.logsigmoid(torch.randn(NT, HV, BT, K, generator=gen, dtype=f64)) * 1e-3).cumsum(2)
    P = ((k * G.exp()) @ (k * (-G).exp()).transpose(-1, -2)).tril(-1)
    beta = torch.rand(NT * BT, HV, generator=gen, dtype=f64)
    A = beta.reshape(NT, BT, HV).transpose(1, 2)[..., None] * P
    X_ref = torch.linalg.inv(torch.eye(BT, dtype=f64) + A)
    P32, b32 = P.float().contiguous().to(DEVICE), beta.float().contiguous().to(DEVICE)
    err = {}
    for name, prec, peel in (("tf32x3", "tf32x3", False), ("tf32", "tf32", False), ("peeled", "tf32", True),
                             ("peeled_rn", "tf32_rn", True)):
        X = _solve_x(P32, b32, prec, peel).cpu().to(f64)
        err[name] = ((X - X_ref).norm() / X_ref.norm()).item()
    bf16 = ((X_ref.float().bfloat16().to(f64) - X_ref).norm() / X_ref.norm()).item()  # X's rounding after the solve
    assert err["tf32x3"] < 1e-6, (err, bf16)
    assert err["tf32"] > 0.3 * bf16, (err, bf16)
    assert err["peeled"] < err["tf32"] / 3, (err, bf16)
    assert err["peeled_rn"] < err["peeled"] / 2, (err, bf16)
    assert err["peeled_rn"] < 0.1 * bf16, (err, bf16)


def test_tf32_products_take_operands_as_the_tensor_cores():
    """`_pdot`'s "tf32": each fp32 operand truncated to tf32's 10 mantissa bits (what the tensor cores do with fp32
    operands; under the interpreter `_tf32` emulates it, on a GPU this checks the hardware); "tf32_rn": rounded to
    the nearest tf32 first, ties to even (`_tf32_rn`). x @ I shows each operand as the product saw it."""
    one_ulp = 2.0 ** -10  # tf32's spacing in [1, 2)
    vals = [1.0, 1 + one_ulp / 2, 1 + one_ulp / 2 + 2 ** -23, 1 + 1.5 * one_ulp, -(1 + one_ulp / 2), 3.0e-3, -7.25,
            0.0, 1 + 0.99 * one_ulp]
    x = torch.zeros(16, 16)
    x[0, :len(vals)] = torch.tensor(vals)
    x = x.to(DEVICE)
    for prec, to_tf32 in (("tf32", _truncate_mantissa), ("tf32_rn", _round_mantissa)):
        y = torch.empty_like(x)
        _pdot_kernel[(1,)](x, y, PREC=prec, INTERPRET=triton_interpreted())
        expect = torch.tensor([to_tf32(v, 10) for v in vals])
        assert torch.equal(y[0, :len(vals)].cpu(), expect), prec


@triton.jit
def _pdot_kernel(x, y, PREC: tl.constexpr, INTERPRET: tl.constexpr):
    o = tl.arange(0, 16)
    eye = tl.where(o[:, None] == o[None, :], 1.0, 0.0)
    tl.store(y + o[:, None] * 16 + o[None, :], _pdot(tl.load(x + o[:, None] * 16 + o[None, :]), eye, PREC, INTERPRET))


def _truncate_mantissa(v: float, bits: int) -> float:
    """v with its mantissa cut to `bits` bits, toward zero (math.frexp: v = m 2^e, 0.5 <= |m| < 1)."""
    m, e = math.frexp(v)
    return math.copysign(math.floor(abs(m) * 2 ** (bits + 1)) / 2 ** (bits + 1) * 2.0 ** e, v)


def _round_mantissa(v: float, bits: int) -> float:
    """v rounded to `bits` mantissa bits, to nearest, ties to even (math.frexp: v = m 2^e, 0.5 <= |m| < 1; Python's
    round() rounds ties to even)."""
    m, e = math.frexp(v)
    return math.copysign(round(abs(m) * 2 ** (bits + 1)) / 2 ** (bits + 1) * 2.0 ** e, v)


@pytest.mark.slow
def test_gate_in_intra_by_default_for_a_precomputed_gate(monkeypatch):
    """gate_in_intra=None (the default): kernel 2's program computes its chunk's G first and kernel 1 is not launched
    for a precomputed gate; for a gate computed in the op kernel 1 runs. o against float64 either way (the variants'
    test checks the bits)."""
    from kda_trace.kernels import chunk
    from launch_spy import LaunchSpy

    assert chunk.LAUNCH["gate_in_intra"] is None
    intra, gate = LaunchSpy(chunk._intra_chunk_kernel), LaunchSpy(chunk._gate_cumsum_kernel)
    monkeypatch.setattr(chunk, "_intra_chunk_kernel", intra)
    monkeypatch.setattr(chunk, "_gate_cumsum_kernel", gate)
    for opts in (KDAOptions(), KDAOptions(gate="safe", lower_bound=-5.0, use_qk_l2norm=True)):
        x = make(1, 70, 1, 2, 20, 12, seed=34, gate=opts.gate)
        o, _, o_ref, _ = run_case(x, opts)
        assert rms_rel(o, o_ref) <= BUDGET
    assert [opt["GATE_HERE"] for opt in intra.options] == [True, False]
    assert len(gate.options) == 1 and gate.options[0]["maxnreg"] == 80  # gate_maxnreg (H200: 1.005 on K3)


def test_safe_gate_logits_x2_no_final_state(l2_where):
    """Lower-bound gate computed in the kernel, beta = 2 sigmoid(b), K != V, final state not asked for."""
    cu = torch.tensor([0, 70, 100])
    x = make(1, 100, 1, 1, 32, 16, seed=3, gate="safe", n_seqs=2)
    x["beta"] = torch.randn(x["beta"].shape, generator=torch.Generator().manual_seed(11)).to(x["beta"])
    opts = KDAOptions(use_qk_l2norm=True, gate="safe", lower_bound=-5.0, beta="logits_x2")
    o, ht, o_ref, _ = run_case(x, opts, cu_seqlens=cu)
    assert ht is None
    assert rms_rel(o, o_ref) <= BUDGET


def test_saturated_safe_gate_takes_the_exact_path(l2_where):
    """Lower bound -5 with the gate saturated (every g = -5): the strongest decay the safe gate allows. With
    anchors at each 8-row half-block the largest exp argument is 7 * 5 = 35 <= MAX_EXP (60), so the kernel
    skips the range check (the test name is historical: no row takes the exact path); the outputs must still
    be finite and accurate."""
    x = make(1, 90, 1, 1, 16, 16, seed=8, gate="safe")
    x["dt_bias"] = torch.full_like(x["dt_bias"], 30.0)  # sigmoid(exp(A_log) * (g_raw + 30)) ~ 1: g ~ -5
    x["A_log"] = torch.zeros_like(x["A_log"])
    opts = KDAOptions(use_qk_l2norm=True, gate="safe", lower_bound=-5.0, output_final_state=True)
    o, ht, o_ref, h_ref = run_case(x, opts)
    assert torch.isfinite(o).all() and torch.isfinite(ht).all()
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET


# entries above the diagonal (dropped) reach exp(15 * 7.5) at the bound and overflow in the interpreter's fp32 products
@pytest.mark.filterwarnings("ignore:overflow encountered in matmul", "ignore:invalid value encountered in matmul")
@pytest.mark.slow
@pytest.mark.parametrize("lower_bound, check_range", [(-7.5, False), (-5.0, False), (-8.0, True)])
def test_safe_gate_diagonal_blocks_at_one_anchor_up_to_its_bound(lower_bound, check_range, monkeypatch):
    """The intra kernel takes its diagonal blocks at one anchor, their row 8 (launch setting intra_one_anchor), with
    no range check where the safe gate bounds every exp argument (lower_bound >= -7.5: 8 gates of at most 7.5 from a
    block's row 8 to its first or last row, exp(60) at most); at -8 with the check (64 > 60: with every gate at the
    bound the blocks take the fall-back). Without the check it launches under a cap of 168 registers
    and takes block 3's earlier columns as 32- and 16-wide tiles (the defaults intra_maxnreg, intra_off_tail None;
    H200: 1.034x on K3); with it uncapped, with one 64-wide tile (the cap lost there: 0.963 at 32 x 16384).
    Every gate saturated at the bound (the largest exp arguments), one sequence of 3 chunks and a ragged tail, L2
    norm and gate in the kernel: o and the final state against float64, and no less accurate than the two anchors
    (o and state RMS-relative within 3%, the worst token within 5%; the interpreter's products are fp32, so there
    the two agree to fp32 rounding: `test_launch_variants_on_gpu` compares them with tf32 products, both ways)."""
    from kda_trace.kernels import chunk
    from launch_spy import LaunchSpy

    x = make(1, 170, 1, 2, 32, 16, seed=21, gate="safe")
    x["dt_bias"] = torch.full_like(x["dt_bias"], 30.0)  # sigmoid(exp(A_log) * (g_raw + 30)) ~ 1: g ~ lower_bound
    x["A_log"] = torch.zeros_like(x["A_log"])
    x["dt_bias"][1, :8] = -30.0  # and some channels of the second head barely decaying
    opts = KDAOptions(use_qk_l2norm=True, gate="safe", lower_bound=lower_bound, output_final_state=True)
    spy = LaunchSpy(chunk._intra_chunk_kernel)
    monkeypatch.setattr(chunk, "_intra_chunk_kernel", spy)
    o, ht, o_ref, h_ref = run_case(x, opts)
    assert chunk.LAUNCH["intra_maxnreg"] is None and chunk.LAUNCH["intra_off_tail"] is None
    launch = spy.options[-1]
    assert launch["ONE_ANCHOR"] is True and launch["CHECK_RANGE"] is check_range
    assert (launch.get("maxnreg"), launch["BJ3"]) == ((None, 64) if check_range else (168, 32))
    assert torch.isfinite(o).all() and torch.isfinite(ht).all()
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET
    monkeypatch.setitem(chunk.LAUNCH, "intra_one_anchor", False)
    o2, ht2, *_ = run_case(x, opts)
    launch = spy.options[-1]
    assert (launch["ONE_ANCHOR"], launch["CHECK_RANGE"], launch.get("maxnreg"), launch["BJ3"]) == (False, False, None,
                                                                                                    64)
    assert rms_rel(o, o_ref) <= 1.03 * rms_rel(o2, o_ref) and rms_rel(ht, h_ref) <= 1.03 * rms_rel(ht2, h_ref)
    assert _worst_token(o, o_ref) <= 1.05 * _worst_token(o2, o_ref)


@pytest.mark.filterwarnings("ignore:overflow encountered in matmul", "ignore:invalid value encountered in matmul")
@pytest.mark.slow
@pytest.mark.parametrize("fallback", [None, "inline"])
def test_one_anchor_range_check_for_precomputed_gates(fallback, monkeypatch):
    """A precomputed gate bounds nothing, so the one-anchor diagonal blocks are range-checked at run time, row by row:
    row i keeps its tensor-core products where it is within MAX_EXP (60) of the block's row 8 in every channel
    (then, G not increasing, so are the columns it reads), else it takes the exact element-wise path (launch setting
    intra_fallback None; with "inline", the block's range is read first from every row and a block past it is
    taken at nested anchors instead); uncapped, with one 64-wide tile for block 3 (`_intra_cap`, `_off_tile`). Bursts of -70 (one token past the range) and -200
    placed so that the check fails for a block's rows 12-15 only (a burst at row 12), for all of a block's rows (a
    burst at row 3: rows 0-7 are then also beyond the clamp of exp(G_i - G_8), which the columns before the block
    and q exp(G) must not use), in one channel only, and in a block with only 13 valid rows (a ragged last chunk).
    o and the final state against float64, as accurate as the two anchors (whose check is by half-block)."""
    from kda_trace.kernels import chunk
    from launch_spy import LaunchSpy

    x = make(1, 173, 1, 2, 32, 16, seed=31)
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    g = x["g"]
    g[:, 16 + 12] = -70.0  # chunk 0, block 1, row 12: rows 12-15 of that block beyond the range
    g[:, 64 + 3, 0] = -200.0  # chunk 1, block 0, row 3, head 0: the whole block
    g[:, 96 + 5, 1, 7] = -70.0  # chunk 1, block 2, row 5, head 1, one channel
    g[:, 160 + 10] = -200.0  # the last block (rows 160-172: 13 valid), row 10
    spy = LaunchSpy(chunk._intra_chunk_kernel)
    monkeypatch.setattr(chunk, "_intra_chunk_kernel", spy)
    monkeypatch.setitem(chunk.LAUNCH, "intra_fallback", fallback)
    opts = KDAOptions(output_final_state=True)
    o, ht, o_ref, h_ref = run_case(x, opts)
    launch = spy.options[-1]
    assert (launch["ONE_ANCHOR"], launch["CHECK_RANGE"], launch.get("maxnreg"), launch["BJ3"]) == (True, True, None, 64)
    assert torch.isfinite(o).all() and torch.isfinite(ht).all()
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET
    assert _worst_token(o, o_ref) <= 2 * BUDGET  # 5.0e-3 under the interpreter
    monkeypatch.setitem(chunk.LAUNCH, "intra_one_anchor", False)
    o2, ht2, *_ = run_case(x, opts)
    assert spy.options[-1]["ONE_ANCHOR"] is False
    assert rms_rel(o, o_ref) <= 1.03 * rms_rel(o2, o_ref) and rms_rel(ht, h_ref) <= 1.03 * rms_rel(ht2, h_ref)
    assert _worst_token(o, o_ref) <= 1.05 * _worst_token(o2, o_ref)


def test_strong_gates_take_the_exact_path():
    """Gates far beyond what a 16-row tensor-core block can factor (exp(+x) would overflow fp32): strong
    unbounded gates (A_log = 3, softplus of large inputs) and precomputed decays down to -200 per token.
    Every output must stay finite and match."""
    x = make(1, 80, 1, 1, 16, 16, seed=4, gate="unbounded")
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    x["A_log"] = torch.full_like(x["A_log"], 3.0)  # exp(A_log) = 20: g ~ -20 * softplus(...), down to ~ -200
    opts = KDAOptions(gate="unbounded", output_final_state=True)
    o, ht, o_ref, h_ref = run_case(x, opts)
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET

    # precomputed: mostly mild, with bursts of -200 inside sub-chunks and a few exact zeros
    g = F.logsigmoid(torch.randn(1, 80, 1, 16, generator=torch.Generator().manual_seed(5)))
    g[:, 20:23] = -200.0
    g[:, 50:52, :, :8] = -200.0
    g[:, 60:64] = 0.0
    x["g"] = g
    o, ht, o_ref, h_ref = run_case(x, KDAOptions(output_final_state=True))
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET


@pytest.mark.parametrize("gate, fallback", [("precomputed", None), ("precomputed", "inline"), ("unbounded", None),
                                           ("unbounded", "elementwise")])
def test_every_block_through_the_fall_back(gate, fallback, monkeypatch):
    """With MAX_EXP below any row's range, every diagonal block takes the fall-back of launch setting intra_fallback
    (A_kk's and A_qk's blocks together): "inline" (None's choice for a gate computed in the op: the block's range
    read first, from three G rows there, from every row for a precomputed gate; the block at nested anchors) or
    "elementwise" (None's for a precomputed gate: `_exact_diag_blocks` after the one-anchor products). Mild decays
    (every row within range by default: precomputed, or the unbounded gate with A = 1) with the L2 norm in the op,
    on packed sequences with ragged last blocks, GVA and K = 40 (K-chunks of 32, the last masked): o and the final
    state within budget, and kept fp32 chunk matrices unlike the anchored products' but within 1e-4 of them (o and
    the state can come out the same bits: A_qk and X are rounded to bf16 on the way)."""
    from kda_trace.kernels import chunk
    from launch_spy import LaunchSpy

    monkeypatch.setitem(chunk.LAUNCH, "intra_fallback", fallback)
    spy = LaunchSpy(chunk._intra_chunk_kernel)
    monkeypatch.setattr(chunk, "_intra_chunk_kernel", spy)
    cu = torch.tensor([0, 37, 130])
    x = make(1, 130, 1, 2, 40, 24, seed=14, n_seqs=2, gate=gate)
    x["A_log"] = torch.zeros_like(x["A_log"])
    opts = KDAOptions(use_qk_l2norm=True, gate=gate, output_final_state=True)

    def kept_matrices():
        kept = {}
        kda_chunk(*(x[n].to(DEVICE) for n in ("q", "k", "v", "g", "beta")), opts, A_log=x["A_log"].to(DEVICE),
                  dt_bias=x["dt_bias"].to(DEVICE), initial_state=x["h0"].to(DEVICE), cu_seqlens=cu.to(DEVICE),
                  saved=kept)
        return kept

    anchored = kept_matrices()
    monkeypatch.setattr(chunk, "MAX_EXP", -1.0)
    o, ht, o_ref, h_ref = run_case(x, opts, cu_seqlens=cu)
    expected = {("precomputed", None): "elementwise", ("precomputed", "inline"): "inline",
                ("unbounded", None): "inline_monotone", ("unbounded", "elementwise"): "elementwise"}
    assert spy.options[-1]["FALLBACK"] == expected[gate, fallback] and spy.options[-1]["CHECK_RANGE"] is True
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET
    exact = kept_matrices()
    assert not torch.equal(exact["P"], anchored["P"]) and not torch.equal(exact["Aqk"], anchored["Aqk"])
    assert (exact["P"] - anchored["P"]).abs().max() <= 1e-4 and (exact["Aqk"] - anchored["Aqk"]).abs().max() <= 1e-4


# ----------------------------------------------------------------------------------------------------------
# the speed variants of chunk.LAUNCH: each on against the defaults, on the cases that reach every path
def _variant_cases():
    """(name, inputs, options, cu_seqlens, use_h0): GVA with odd dims and every in-kernel option; the saturated
    safe gate (exact path of the diagonal blocks); strong precomputed decays with bursts (exact path, zeros);
    bf16 inputs with an initial state; one sequence of eleven chunks (the state pass's chain)."""
    cu = torch.tensor([0, 1, 17, 100, 120])
    a = make(1, 120, 1, 2, 48, 40, seed=2, gate="unbounded", n_seqs=4)
    a["beta"] = torch.randn(a["beta"].shape, generator=torch.Generator().manual_seed(3))  # logits
    a_opts = KDAOptions(scale=0.3, use_qk_l2norm=True, gate="unbounded", beta="logits", state_layout="vk",
                        output_final_state=True)
    b = make(1, 90, 1, 1, 16, 16, seed=8, gate="safe")
    b["dt_bias"] = torch.full_like(b["dt_bias"], 30.0)
    b["A_log"] = torch.zeros_like(b["A_log"])
    b_opts = KDAOptions(use_qk_l2norm=True, gate="safe", lower_bound=-5.0, beta="logits_x2",
                        output_final_state=True)
    c = make(1, 80, 1, 1, 16, 16, seed=4)
    c["q"], c["k"] = F.normalize(c["q"], dim=-1), F.normalize(c["k"], dim=-1)
    c["g"][:, 20:23] = -200.0
    c["g"][:, 50:52, :, :8] = -200.0
    c["g"][:, 60:64] = 0.0
    d = make(1, 192, 1, 1, 64, 64, seed=6, dtype=torch.bfloat16)
    d["q"] = F.normalize(d["q"].float(), dim=-1).bfloat16()
    d["k"] = F.normalize(d["k"].float(), dim=-1).bfloat16()
    e = make(1, 700, 1, 1, 16, 16, seed=15)
    e["q"], e["k"] = F.normalize(e["q"], dim=-1), F.normalize(e["k"], dim=-1)
    return [("gva odd dims", a, a_opts, cu, False), ("saturated safe gate", b, b_opts, None, True),
            ("strong precomputed", c, KDAOptions(output_final_state=True), None, True),
            ("bf16", d, KDAOptions(output_final_state=True), None, True),
            ("eleven chunks", e, KDAOptions(output_final_state=True), None, True)]


_DEFAULT_RUNS: dict = {}


def _worst_token(o, ref):
    """The largest RMS-relative error of one token's output (all its heads), over tokens with a nonzero output."""
    return max(rms_rel(o[0, t], ref[0, t]) for t in range(ref.shape[1]) if ref[0, t].abs().max() > 0)


VARIANTS = {
    "gate_bk_32": {"gate_bk": 32},
    "exp_not_exp2": {"exp2": False}, "out_bv_64": {"out_bv": 64}, "out_in_state": {"out_in_state": True},
    "output_kernel": {"out_in_state": False}, "state_split_4": {"state_split": 4},
    "intra_per_block": {"intra_one_launch": False}, "state_split_off": {"state_split": 0},
    "qg_in_wu": {"qg_in_intra": False}, "qg_in_wu_fused": {"qg_in_intra": False, "out_in_state": True},
    "qg_in_wu_per_block": {"qg_in_intra": False, "intra_one_launch": False},
    "l2_in_gate_kernel": {"l2_in_intra": False},
    "kg_in_wu": {"kg_in_intra": False}, "kg_in_intra": {"kg_in_intra": True},
    "kg_in_intra_per_block": {"kg_in_intra": True, "intra_one_launch": False},
    "kg_in_intra_qg_in_wu": {"kg_in_intra": True, "qg_in_intra": False},
    "kg_in_intra_l2_in_gate_kernel": {"kg_in_intra": True, "l2_in_intra": False},
    "gate_in_intra": {"gate_in_intra": True}, "gate_kernel": {"gate_in_intra": False},
    "gate_in_intra_l2_in_gate": {"gate_in_intra": True, "l2_in_intra": False},
    "solve_merges_tf32x3": {"solve_merge_precision": "tf32x3"},
    "solve_tf32x3": {"solve_merge_precision": "tf32x3", "solve_inv_precision": "tf32x3"},
    "solve_powers_tf32_rest_tf32x3": {"solve_power_precision": "tf32", "solve_merge_precision": "tf32x3",
                                      "solve_inv_precision": "tf32x3"},
    "solve_unpeeled": {"solve_peel": False},
    "solve_tf32_truncated": {"solve_merge_precision": "tf32", "solve_inv_precision": "tf32"},
    "solve_tf32_truncated_unpeeled": {"solve_merge_precision": "tf32", "solve_inv_precision": "tf32",
                                      "solve_peel": False},
    "solve_unpeeled_tf32x3": {"solve_peel": False, "solve_merge_precision": "tf32x3", "solve_inv_precision": "tf32x3"},
    "discard_g": {"discard_g": True, "kg_in_intra": True}, "discard_g_off": {"discard_g": False},
    "intra_stream_off": {"intra_stream": False}, "intra_two_anchors": {"intra_one_anchor": False},
    "intra_fallback_elementwise": {"intra_fallback": "elementwise"},
    "intra_fallback_inline": {"intra_fallback": "inline"},
    "intra_64_wide_off_tile": {"intra_off_tail": False},
    "intra_64_wide_off_tile_per_block": {"intra_off_tail": False, "intra_one_launch": False},
    "state_prefetch_off": {"state_prefetch": False},
    "state_prefetch_with_the_output": {"state_prefetch": True, "out_in_state": True},
    # the launch settings before the speed variants above became defaults
    "first_defaults": {"exp2": False, "l2_in_intra": False, "out_bv": 64, "out_warps": 8, "wu_bk": 32, "wu_bv": 32,
                       "wu_warps": 8, "intra_one_launch": False, "state_split": 0},
}
# these change the order or rounding of fp32 operations; the others do the defaults' operations in the same order
ROUNDS_DIFFERENTLY = {"exp2", "out_bv", "out_in_state", "l2_in_intra", "state_split", "qg_in_intra",
                      "solve_inv_precision", "solve_merge_precision", "solve_power_precision", "solve_peel",
                      "intra_one_anchor", "intra_fallback"}
# the settings that the defaults replaced: the defaults must be no less accurate than these either
REPLACED = ("first_defaults", "intra_two_anchors")


# Each variant runs five cases (one of eleven chunks): 5-30 s under the interpreter, 12 minutes for all of them on a
# CPU. The slow tier runs the settings the defaults replaced and two that change the rounding (the split state pass,
# the tf32x3 solve); the others are in the large tier (make test-large).
SLOW_VARIANTS = (*REPLACED, "state_split_4", "solve_tf32x3", "intra_fallback_elementwise", "intra_fallback_inline")


@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.slow if k in SLOW_VARIANTS else pytest.mark.large)
                                     for k, v in VARIANTS.items()], ids=list(VARIANTS))
def test_launch_variants_against_float64_and_defaults(variant, monkeypatch):
    """Each variant within the budget of the float64 recurrence and no less accurate than the defaults (o and
    final state RMS-relative, and the worst token). The variants outside ROUNDS_DIFFERENTLY do the same fp32
    operations in the same order as the defaults, so under the interpreter their results are bit-identical."""
    from kda_trace.kernels import chunk
    from kda_trace.platform import triton_interpreted

    for name, x, opts, cu, use_h0 in _variant_cases():
        if name not in _DEFAULT_RUNS:
            _DEFAULT_RUNS[name] = run_case(x, opts, cu_seqlens=cu, use_h0=use_h0)
        o0, h0, o_ref, h_ref = _DEFAULT_RUNS[name]
        with monkeypatch.context() as m:
            for key, value in variant.items():
                assert key in chunk.LAUNCH
                m.setitem(chunk.LAUNCH, key, value)
            o, ht, *_ = run_case(x, opts, cu_seqlens=cu, use_h0=use_h0)
        assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET, name
        if triton_interpreted() and not ROUNDS_DIFFERENTLY & set(variant):
            assert torch.equal(o, o0) and torch.equal(ht, h0), name
            continue
        # rounded differently: the same accuracy, within 3% of the default's error (5% for the worst token)
        assert rms_rel(o, o_ref) <= 1.03 * rms_rel(o0, o_ref), name
        assert rms_rel(ht, h_ref) <= 1.03 * rms_rel(h0, h_ref), name
        assert _worst_token(o, o_ref) <= 1.05 * _worst_token(o0, o_ref), name
        if any(variant is VARIANTS[r] for r in REPLACED):
            # and the other way: the defaults that replaced these lost no accuracy
            assert rms_rel(o0, o_ref) <= 1.03 * rms_rel(o, o_ref), name
            assert rms_rel(h0, h_ref) <= 1.03 * rms_rel(ht, h_ref), name
            assert _worst_token(o0, o_ref) <= 1.05 * _worst_token(o, o_ref), name


@pytest.mark.slow
def test_many_sequence_head_pairs_take_the_output_in_the_state_pass(monkeypatch):
    """From 64 (sequence, head) pairs on, the default computes O in the state pass (out_in_state=None picks it):
    34 packed sequences x 2 value heads, lengths 1 to 80 (one or two chunks), GVA, V = 24 (a 64-wide tile
    mostly masked), initial states. o and the final states within the float64 budget, and equal to the separate
    output kernel's within rounding (the same products, summed in another order)."""
    from kda_trace.kernels import chunk

    assert chunk.LAUNCH["out_in_state"] is None
    assert chunk._state_launch(68, 16, 24)[2] and not chunk._state_launch(63, 16, 24)[2]
    gen = torch.Generator().manual_seed(21)
    lens = torch.randint(1, 81, (34,), generator=gen)
    lens[:3] = torch.tensor([1, 64, 65])
    cu = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)])
    x = make(1, int(cu[-1]), 1, 2, 16, 24, seed=22, n_seqs=34)
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    opts = KDAOptions(output_final_state=True)
    o, ht, o_ref, h_ref = run_case(x, opts, cu_seqlens=cu)
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET
    monkeypatch.setitem(chunk.LAUNCH, "out_in_state", False)
    o2, ht2, *_ = run_case(x, opts, cu_seqlens=cu)
    assert torch.equal(ht, ht2)
    assert (o - o2).abs().max() <= 1e-5 * o2.abs().max()


@pytest.mark.slow
def test_state_pass_loads_the_decay_row_a_step_ahead_where_o_is_not_in_it(monkeypatch):
    """state_prefetch=None (the default): kernel 5 loads each chunk's last G row one step ahead (PREFETCH) where it
    does not compute O (`chunk._state_prefetch`; H200: 1.03x at 32 pairs), not where it does (no gain measured).
    The same operations in the same order: under the interpreter bit-identical to the plain load, with and without
    O in the pass, on packed sequences that end inside, at the end of and one row into a chunk (the load after a
    sequence's last chunk is masked off), with the final states."""
    from kda_trace.kernels import chunk
    from kda_trace.platform import triton_interpreted
    from launch_spy import LaunchSpy

    assert chunk.LAUNCH["state_prefetch"] is None
    spy = LaunchSpy(chunk._state_kernel)
    monkeypatch.setattr(chunk, "_state_kernel", spy)
    cu = torch.tensor([0, 64, 129, 150, 278])
    x = make(1, 278, 1, 2, 16, 12, seed=36, n_seqs=4)
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    opts = KDAOptions(output_final_state=True)
    runs = {}
    for out_in_state in (False, True):
        for prefetch in (None, out_in_state):  # the default, then the other choice
            monkeypatch.setitem(chunk.LAUNCH, "out_in_state", out_in_state)
            monkeypatch.setitem(chunk.LAUNCH, "state_prefetch", prefetch)
            runs[out_in_state, prefetch] = run_case(x, opts, cu_seqlens=cu)
    assert [opt["PREFETCH"] for opt in spy.options] == [True, False, False, True]
    for (out_in_state, prefetch), (o, ht, o_ref, h_ref) in runs.items():
        assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET
        if triton_interpreted() and prefetch is not None:
            o0, h0, *_ = runs[out_in_state, None]
            assert torch.equal(o, o0) and torch.equal(ht, h0)


@pytest.mark.slow
def test_state_split_into_segments(monkeypatch):
    """The state pass split into segments (launch setting state_split: kernels 5a and 5b chain the segments'
    affine maps, then every segment runs from its start state): o, the final states and the chunk states within
    the float64 budget and no less accurate than the sequential pass (25% slack: other roundings), on weak decays
    (so that states carry across many chunks). Packed: GVA, odd K and V, [V, K] states, lengths 700 (11 chunks),
    1, 130 and 64; segments of 3 chunks, and of 1 with the output in the state pass."""
    from kda_trace.kernels import chunk

    cu = torch.tensor([0, 700, 701, 831, 895])
    x = make(1, 895, 1, 2, 48, 40, seed=23, n_seqs=4)
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    x["g"] = x["g"] * 0.1
    opts = KDAOptions(output_final_state=True, state_layout="vk")
    args = [x[n].to(DEVICE) for n in ("q", "k", "v", "g", "beta")]
    h0 = x["h0"].transpose(-1, -2).contiguous().to(DEVICE)
    o_ref, h_ref = ref_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], opts.resolved_scale(48), x["h0"], cu, False)
    h_ref = h_ref.transpose(-1, -2)

    def run(split, out_in_state):
        monkeypatch.setitem(chunk.LAUNCH, "state_split", split)
        monkeypatch.setitem(chunk.LAUNCH, "out_in_state", out_in_state)
        return kda_chunk(*args, opts, initial_state=h0, cu_seqlens=cu.to(DEVICE), output_chunk_states=True)

    o0, ht0, states0 = run(0, False)
    for split, out_in_state in ((3, False), (1, True)):
        o, ht, states = run(split, out_in_state)
        assert not torch.equal(o, o0)  # the split pass ran (it rounds differently)
        assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET
        assert rms_rel(o, o_ref) <= 1.25 * rms_rel(o0, o_ref) and rms_rel(ht, h_ref) <= 1.25 * rms_rel(ht0, h_ref)
        assert states.shape == states0.shape and rms_rel(states, states0) <= BUDGET


@pytest.mark.parametrize("H,HV,K,V,layout", [(1, 2, 32, 24, "kv"), (1, 2, 100, 160, "kv"), (2, 2, 128, 16, "vk"),
                                             (1, 1, 256, 32, "kv")])
@pytest.mark.slow
def test_long_sequences_of_few_heads_split_the_state_pass_by_default(H, HV, K, V, layout, monkeypatch):
    """state_split=None (the default) splits into SPLIT_CHUNKS-chunk segments where at most SPLIT_MAX_PAIRS
    (sequence, head) pairs hold a sequence of at least SPLIT_MIN_CHUNKS chunks, and nowhere else; K > 128
    never splits. With the constants shrunk (1-chunk segments from 2 chunks on), a packed batch of 3, 1 and 1
    chunks takes the split pass by default (K <= 128: GVA, K and V not powers of two, V over two 5a tiles,
    [V, K] states): its results differ from the unsplit pass's (other roundings) and stay within the float64
    budget and within 3% of the unsplit pass's error. At K = 256 it stays unsplit, bit for bit."""
    from kda_trace.kernels import chunk

    assert chunk.LAUNCH["state_split"] is None
    pairs, chunks = chunk.SPLIT_MAX_PAIRS, chunk.SPLIT_MIN_CHUNKS
    assert chunk._split_launch(pairs, chunks, 128) == chunk.SPLIT_CHUNKS
    assert chunk._split_launch(pairs + 1, chunks, 128) == 0
    assert chunk._split_launch(pairs, chunks - 1, 128) == 0
    assert chunk._split_launch(1, 10**6, 256) == 0
    monkeypatch.setitem(chunk.LAUNCH, "state_split", 2)
    assert chunk._split_launch(10**4, 1, 64) == 2  # an explicit setting is used as given

    cu = torch.tensor([0, 150, 151, 200])
    x = make(1, 200, H, HV, K, V, seed=24, n_seqs=3)
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    x["g"] = x["g"] * 0.1
    opts = KDAOptions(output_final_state=True, state_layout=layout)
    monkeypatch.setitem(chunk.LAUNCH, "state_split", 0)
    o0, h0, o_ref, h_ref = run_case(x, opts, cu_seqlens=cu)
    monkeypatch.setitem(chunk.LAUNCH, "state_split", None)
    monkeypatch.setattr(chunk, "SPLIT_CHUNKS", 1)
    monkeypatch.setattr(chunk, "SPLIT_MIN_CHUNKS", 2)
    o, ht, *_ = run_case(x, opts, cu_seqlens=cu)
    if K > 128:
        assert torch.equal(o, o0) and torch.equal(ht, h0)
        return
    assert not torch.equal(o, o0)  # the split pass ran
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET
    assert rms_rel(o, o_ref) <= 1.03 * rms_rel(o0, o_ref) and rms_rel(ht, h_ref) <= 1.03 * rms_rel(h0, h_ref)
    monkeypatch.setattr(chunk, "SPLIT_MIN_CHUNKS", 4)  # now no sequence is long enough: the unsplit pass
    o2, ht2, *_ = run_case(x, opts, cu_seqlens=cu)
    assert torch.equal(o2, o0) and torch.equal(ht2, h0)


def test_bf16_inputs_error_budget():
    """bf16 q/k/v/beta against the float64 recurrence on the same (bf16-rounded) values: <= 5e-3."""
    x = make(1, 192, 1, 1, 64, 64, seed=6, dtype=torch.bfloat16)
    x["q"] = F.normalize(x["q"].float(), dim=-1).bfloat16()
    x["k"] = F.normalize(x["k"].float(), dim=-1).bfloat16()
    o, ht, o_ref, h_ref = run_case(x, KDAOptions(output_final_state=True))
    assert o.dtype == torch.bfloat16
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET


@pytest.mark.slow
def test_causal_later_tokens_do_not_change_earlier_outputs(monkeypatch):
    """With the diagonal blocks at two anchors (intra_one_anchor=False: every anchor row at or before the rows it
    serves), changing every input from token 37 on (inside a sub-chunk, before the second half-anchor at 40) leaves
    outputs 0..36 bit-identical, with strong gates so that the exact fallback path runs too."""
    from kda_trace.kernels import chunk

    monkeypatch.setitem(chunk.LAUNCH, "intra_one_anchor", False)
    x = make(1, 96, 1, 1, 16, 16, seed=7, gate="unbounded")
    x["A_log"] = torch.full_like(x["A_log"], 2.5)
    opts = KDAOptions(gate="unbounded", use_qk_l2norm=True)
    o1, *_ = run_case(x, opts)
    y = {n: t.clone() for n, t in x.items()}
    gen = torch.Generator().manual_seed(8)
    for name in ("q", "k", "v", "g", "beta"):
        y[name][:, 37:] = torch.randn(y[name][:, 37:].shape, generator=gen).to(y[name].dtype)
    y["g"][:, 37:] *= 30  # much stronger later gates
    o2, *_ = run_case(y, opts)
    assert torch.equal(o1[:, :37], o2[:, :37])
    assert not torch.equal(o1[:, 37:], o2[:, 37:])


@pytest.mark.slow
@pytest.mark.parametrize("gate", ["safe", "precomputed"])
def test_causal_under_one_anchor_up_to_rounding_in_the_block(gate):
    """With the diagonal blocks at one anchor (the default: row 8 of each 16-row block), rows 0-7 of a block are
    rounded relative to G at its row 8, a later token: changing every input from token 37 on (row 5 of block 2,
    whose anchor is token 40) leaves outputs 0..31 bit-identical and moves 32..36 only by rounding (tf32 operands
    scaled by exp(G_i - G_40); for a precomputed gate also the range check, which the later gates can fail), within
    half the float64 budget. (With two anchors earlier outputs are bit-identical: the test above.)"""
    x = make(1, 96, 1, 1, 16, 16, seed=7, gate=gate)
    if gate == "safe":
        opts = KDAOptions(gate="safe", lower_bound=-5.0, use_qk_l2norm=True)
    else:
        x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
        opts = KDAOptions()
    o1, _, o_ref, _ = run_case(x, opts)
    y = {n: t.clone() for n, t in x.items()}
    gen = torch.Generator().manual_seed(8)
    for name in ("q", "k", "v", "g", "beta"):
        y[name][:, 37:] = torch.randn(y[name][:, 37:].shape, generator=gen).to(y[name].dtype)
    y["g"][:, 37:] *= 30  # saturated later gates: G_40 far from G_37
    if gate == "precomputed":
        y["g"][:, 37:] = -y["g"][:, 37:].abs()  # a log decay (<= 0), up to ~ -100 per token
    o2, *_ = run_case(y, opts)
    assert torch.equal(o1[:, :32], o2[:, :32])
    # the interpreter's products are fp32 (no tf32 truncation): there the wobble is fp32 rounding, which the bf16
    # roundings after it (A_qk, X) mostly absorb; on a GPU it is tf32's
    assert rms_rel(o2[:, 32:37], o1[:, 32:37]) <= BUDGET / 2
    assert rms_rel(o1, o_ref) <= BUDGET
    assert not torch.equal(o1[:, 37:], o2[:, 37:])


def test_chunk_tables():
    """Chunk list of a packing: (sequence, chunk within it) per global chunk, first chunk per sequence."""
    from kda_trace.kernels.chunk import _chunk_tables

    cu, indices, offsets, nt = _chunk_tables([1, 64, 65, 130], "cpu")
    assert nt == 7
    assert cu.tolist() == [0, 1, 65, 130, 260] and cu.dtype == torch.int64
    assert indices.tolist() == [[0, 0], [1, 0], [2, 0], [2, 1], [3, 0], [3, 1], [3, 2]]
    assert offsets.tolist() == [0, 1, 2, 4]
    assert indices.dtype == torch.int32 and offsets.dtype == torch.int64


@pytest.mark.slow
def test_cu_seqlens_read_once_per_tensor_and_version():
    """The chunk tables are cached per cu_seqlens tensor; an in-place change of its values must not reuse
    them (the cache key holds the version counter), and a new tensor with other values gets its own."""
    x = make(1, 80, 1, 1, 16, 16, seed=12, n_seqs=2)
    x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
    opts = KDAOptions(output_final_state=True)
    cu = torch.tensor([0, 70, 80], device=DEVICE)
    o1, h1, o1_ref, h1_ref = run_case(x, opts, cu_seqlens=cu)
    assert rms_rel(o1, o1_ref) <= BUDGET
    o1b, h1b, *_ = run_case(x, opts, cu_seqlens=cu)  # the cached tables
    assert torch.equal(o1b, o1) and torch.equal(h1b, h1)
    with torch.no_grad():
        cu[1] = 10  # in place: bumps the version
    o2, h2, o2_ref, h2_ref = run_case(x, opts, cu_seqlens=cu)
    assert rms_rel(o2, o2_ref) <= BUDGET and rms_rel(h2, h2_ref) <= BUDGET
    assert rms_rel(h2, h1_ref) > 0.1  # the other split really gives other states
    o3, h3, *_ = run_case(x, opts, cu_seqlens=torch.tensor([0, 70, 80], device=DEVICE))
    assert torch.equal(o3, o1) and torch.equal(h3, h1)


@pytest.mark.slow
def test_graph_capture_needs_cached_tables(monkeypatch):
    """Under a CUDA graph capture, a cache miss (host work) is a clear error; a cached shape goes through."""
    x = make(1, 70, 1, 1, 16, 16, seed=13)
    args = [x[n].to(DEVICE) for n in ("q", "k", "v", "g", "beta")]
    o1, _ = kda_chunk(*args)  # caches the dense (1, 70) tables
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    o2, _ = kda_chunk(*args)
    assert torch.equal(o1, o2)
    with pytest.raises(RuntimeError, match="before capturing"):
        kda_chunk(*[a[:, :69] for a in args])


def test_rejects_bad_inputs():
    x = make(1, 8, 1, 1, 16, 16, seed=9)
    args = [x[n] for n in ("q", "k", "v", "g", "beta")]
    with pytest.raises(ValueError, match="at least one token"):
        kda_chunk(*args, cu_seqlens=torch.tensor([0, 4, 4, 8]))
    with pytest.raises(ValueError, match="must run from 0 to 8 tokens"):
        kda_chunk(*args, cu_seqlens=torch.tensor([0, 4, 7]))
    with pytest.raises(ValueError, match="multiple"):
        kda_chunk(x["q"].repeat(1, 1, 2, 1), x["k"].repeat(1, 1, 2, 1), *args[2:])
    with pytest.raises(ValueError, match="needs A_log"):
        kda_chunk(*args, KDAOptions(gate="safe"))
    with pytest.raises(ValueError, match="initial_state must be"):
        kda_chunk(*args, initial_state=torch.zeros(1, 1, 16, 8))


@pytest.mark.slow
def test_head_dims_128_256_and_100():
    """K = 128 with V = 256, and K = V = 100 (slow under the interpreter)."""
    for (K, V, seed) in ((128, 256, 10), (100, 100, 11)):
        x = make(1, 80, 1, 2, K, V, seed=seed)
        x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
        o, ht, o_ref, h_ref = run_case(x, KDAOptions(output_final_state=True))
        assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET


# ----------------------------------------------------------------------------------------------------------
# GPU: int64 addressing, and fla's chunk_kda side by side
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@needs_gpu
def test_int64_addressing_past_2_31_elements():
    """q with more than 2^31 elements (H = 1, K = 256, 8.4M packed tokens; V = 16 keeps memory near 40 GB):
    the last sequence must come out exactly as when it runs alone."""
    H, K, V = 1, 256, 16
    T = (2**31) // (H * K) + 1000
    last = 300
    cu = torch.tensor([0, T - last, T], device="cuda")
    bf = torch.bfloat16
    q = torch.randn(1, T, H, K, device="cuda", dtype=bf)
    k = torch.randn(1, T, H, K, device="cuda", dtype=bf)
    v = torch.randn(1, T, H, V, device="cuda", dtype=bf)
    g_raw = torch.randn(1, T, H, K, device="cuda", dtype=bf)
    b = torch.randn(1, T, H, device="cuda", dtype=bf)
    A_log, dt_bias = torch.zeros(H, device="cuda"), torch.zeros(H, K, device="cuda")
    assert q.numel() > 2**31
    opts = KDAOptions(use_qk_l2norm=True, gate="safe", beta="logits", output_final_state=True)
    o, ht = kda_chunk(q, k, v, g_raw, b, opts, A_log=A_log, dt_bias=dt_bias, cu_seqlens=cu)
    s = slice(T - last, T)
    o1, ht1 = kda_chunk(q[:, s], k[:, s], v[:, s], g_raw[:, s], b[:, s], opts, A_log=A_log, dt_bias=dt_bias)
    assert torch.equal(o[:, s], o1) and torch.equal(ht[1], ht1[0])
    assert torch.isfinite(o[:, :1000]).all()


@pytest.mark.gpu
@needs_gpu
def test_launch_variants_on_gpu(monkeypatch):
    """Each speed variant of chunk.LAUNCH compiled (what the interpreter cannot check, e.g. ex2): K = V = 128,
    bf16, safe gate, L2 norm, beta logits, packed lengths 1500, 37 and 463 with initial states. o and the final
    states against float64: within the budget, and within 3% of the defaults' error (5% for the worst token)."""
    from kda_trace.kernels import chunk

    x = make(1, 2000, 4, 4, 128, 128, seed=16, dtype=torch.bfloat16, gate="safe", n_seqs=3)
    x["beta"] = torch.randn(x["beta"].shape, generator=torch.Generator().manual_seed(17)).bfloat16()
    cu = torch.tensor([0, 1500, 1537, 2000])
    opts = KDAOptions(use_qk_l2norm=True, gate="safe", lower_bound=-5.0, beta="logits", output_final_state=True)
    o0, h0, o_ref, h_ref = run_case(x, opts, cu_seqlens=cu)
    e_o, e_h, e_w = rms_rel(o0, o_ref), rms_rel(h0, h_ref), _worst_token(o0, o_ref)
    assert e_o <= BUDGET and e_h <= BUDGET
    args = [x[n].cuda() for n in ("q", "k", "v", "g", "beta")]
    for name, variant in VARIANTS.items():
        with monkeypatch.context() as m:
            for key, value in variant.items():
                m.setitem(chunk.LAUNCH, key, value)
            o, ht = kda_chunk(*args, opts, A_log=x["A_log"].cuda(), dt_bias=x["dt_bias"].cuda(),
                              initial_state=x["h0"].cuda(), cu_seqlens=cu.cuda())
        assert rms_rel(o, o_ref) <= 1.03 * e_o and rms_rel(ht, h_ref) <= 1.03 * e_h, name
        assert _worst_token(o, o_ref) <= 1.05 * e_w, name
        if name in REPLACED:  # the defaults that replaced these lost no accuracy
            assert e_o <= 1.03 * rms_rel(o, o_ref) and e_h <= 1.03 * rms_rel(ht, h_ref)
            assert e_w <= 1.05 * _worst_token(o, o_ref)


@pytest.mark.gpu
@needs_gpu
def test_matches_fla_chunk_kda_on_gpu():
    fla = pytest.importorskip("fla.ops.kda")
    x = make(1, 1000, 4, 4, 128, 128, seed=12, dtype=torch.bfloat16, gate="safe")
    x = {n: t.cuda() for n, t in x.items()}
    x["beta"] = torch.randn(x["beta"].shape, generator=torch.Generator().manual_seed(11)).to(x["beta"])
    cu = torch.tensor([0, 100, 613, 1000], device="cuda")
    opts = KDAOptions(use_qk_l2norm=True, gate="safe", beta="logits", output_final_state=True)
    h0 = torch.randn(3, 4, 128, 128, device="cuda")
    o, ht = kda_chunk(x["q"], x["k"], x["v"], x["g"], x["beta"], opts, A_log=x["A_log"], dt_bias=x["dt_bias"],
                      initial_state=h0, cu_seqlens=cu)
    o2, ht2 = fla.chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=h0, output_final_state=True,
                            use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                            safe_gate=True, lower_bound=-5.0, A_log=x["A_log"], dt_bias=x["dt_bias"].flatten(),
                            cu_seqlens=cu)
    assert rms_rel(o, o2.float()) < 1e-2 and rms_rel(ht, ht2) < 1e-2
    assert math.isfinite(rms_rel(o, o2.float()))


# ----------------------------------------------------------------------------------------------------------
# adapters (kda_trace/solutions/ours_chunk.py) against the families' own reference code
@pytest.mark.slow
@pytest.mark.parametrize("safe", [False, True])
def test_adapter_prefill_vs_family_reference(safe):
    """The prefill family's reference vs the adapter: with an initial state (unbounded gate) or without
    (safe gate)."""
    from kda_trace.solutions import ours_chunk

    H, HV, K, V = 1, 2, 16, 16
    ref = load_reference("prefill", NUM_HEADS=H, NUM_V_HEADS=HV, HEAD_DIM_K=K, HEAD_DIM_V=V,
                         LOWER_BOUND=-5.0 if safe else None)
    tags = ["stage:prefill", "beta:logits", "qk_norm:l2", "state_layout:vk",
            *(["gate:safe", "lower_bound:-5"] if safe else ["gate:unbounded"])]
    run = ours_chunk.build(FakeDefinition(f"kda_prefill_h{H}_d{K}_k_last", tags, "initial_state"))
    gen = torch.Generator().manual_seed(13)
    r = lambda *s: torch.randn(*s, generator=gen)
    T, bf = 50, torch.bfloat16
    inputs = {"q": r(T, H, K).to(bf), "k": r(T, H, K).to(bf), "v": r(T, HV, V).to(bf), "g_raw": r(T, HV, K).to(bf),
                  "A_log": r(HV) * 0.5, "dt_bias": r(HV, K), "b": r(T, HV).to(bf), "initial_state": r(3, HV, V, K),
                  "cu_seqlens": torch.tensor([0, 5, 30, 50]), "scale": K ** -0.5}
    if safe:
        inputs["initial_state"] = None
    o_ref, h_ref = ref.run(**{n: (x.float() if n == "v" else x) for n, x in inputs.items()})
    o, ht = run(**{n: x.to(DEVICE) if torch.is_tensor(x) else x for n, x in inputs.items()})
    assert o.shape == o_ref.shape and o.dtype == bf and ht.shape == h_ref.shape
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET


@pytest.mark.slow
def test_adapter_forward_vs_family_reference():
    from kda_trace.solutions import ours_chunk

    H, HV, K, V = 1, 2, 16, 32
    ref = load_reference("forward", NUM_HEADS=H, NUM_V_HEADS=HV, HEAD_DIM_K=K, HEAD_DIM_V=V)
    run = ours_chunk.build(FakeDefinition("kda_fwd_h1_d16_v_last", ["stage:forward"], "initial_state", ("head_dim_k", "head_dim_v")))
    x = make(2, 40, H, HV, K, V, seed=14, dtype=torch.bfloat16)
    q, k = (F.normalize(x[n].float(), dim=-1).bfloat16() for n in ("q", "k"))
    inputs = {"q": q, "k": k, "v": x["v"], "g": x["g"], "beta": x["beta"], "initial_state": x["h0"], "scale": 0.25}
    o_ref, h_ref = ref.run(**{n: (t.float() if n == "v" else t) for n, t in inputs.items()})
    o, ht = run(**{n: t.to(DEVICE) if torch.is_tensor(t) else t for n, t in inputs.items()})
    assert rms_rel(o, o_ref) <= BUDGET and rms_rel(ht, h_ref) <= BUDGET
    assert ours_chunk.supports(FakeDefinition("kda_decode_h1_d16_k_last", ["stage:decode"])) is not None


@pytest.mark.parametrize("layout", ["kv", "vk"])
@pytest.mark.slow
def test_chunk_states_every_chunk_start(layout):
    """output_chunk_states: packed lengths 130, 1, 64, 65 (3 + 1 + 1 + 2 chunk entries), GVA, odd dims: entry
    c of a sequence is the float64 state after its first 64 * c tokens (c = 0: the initial state, exactly)."""
    lens = [130, 1, 64, 65]
    cu = torch.tensor([0, 130, 131, 195, 260])
    x = make(1, 260, 1, 2, 24, 20, seed=21, gate="unbounded", n_seqs=4)
    x["beta"] = torch.randn(x["beta"].shape, generator=torch.Generator().manual_seed(11)).to(x["beta"])
    opts = KDAOptions(use_qk_l2norm=True, gate="unbounded", beta="logits", state_layout=layout,
                      output_final_state=True)
    h0 = x["h0"].transpose(-1, -2).contiguous() if layout == "vk" else x["h0"]
    dv = lambda t: t.to(DEVICE)
    o, ht, hs = kda_chunk(dv(x["q"]), dv(x["k"]), dv(x["v"]), dv(x["g"]), dv(x["beta"]), opts, A_log=dv(x["A_log"]),
                          dt_bias=dv(x["dt_bias"]), initial_state=dv(h0), cu_seqlens=dv(cu), output_chunk_states=True)
    assert hs.shape == (7, *h0.shape[1:]) and hs.dtype == torch.float32
    g = ref_gate(x["g"], x["A_log"], x["dt_bias"], "unbounded")
    beta = ref_beta(x["beta"], "logits")
    row = 0
    for n, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        for c in range(-(-(e - s) // 64)):
            if c == 0:
                assert torch.equal(hs[row].cpu(), h0[n]), (n, c)
            else:
                cut = slice(s, s + 64 * c)
                _, h_ref = ref_kda(x["q"][:, cut], x["k"][:, cut], x["v"][:, cut], g[:, cut], beta[:, cut],
                                   opts.resolved_scale(24), x["h0"][n:n + 1], None, True)
                got = hs[row].cpu().transpose(-1, -2) if layout == "vk" else hs[row].cpu()
                assert rms_rel(got, h_ref[0]) <= BUDGET, (n, c)
            row += 1
    assert row == len(hs) == sum(-(-n // 64) for n in lens)
    o2, ht2 = kda_chunk(dv(x["q"]), dv(x["k"]), dv(x["v"]), dv(x["g"]), dv(x["beta"]), opts, A_log=dv(x["A_log"]),
                        dt_bias=dv(x["dt_bias"]), initial_state=dv(h0), cu_seqlens=dv(cu))
    assert torch.equal(o, o2) and torch.equal(ht, ht2)  # asking for the states changes nothing else


def chunk_truth(x, cu, heads, lower_bound):
    """Float64 chunk quantities of inputs from `make` (L2 norm in the op, safe gate with this bound, beta logits,
    one q/k head): for every 64-token chunk of every sequence in cu and every value head, in order, a dict of r0
    and n (its first row and rows), hv, G (the cumulative log decay [n, K]), k (normalised [n, K]), beta [n], P
    (A_kk without beta, strictly lower), Aqk (A_qk without the scale, lower with the diagonal) and
    X = (I + diag(beta) P)^-1, each [n, n]."""
    norm = lambda t: t.to(f64) / torch.sqrt((t.to(f64) ** 2).sum(-1, keepdim=True) + 1e-6)
    q, k = norm(x["q"][0]), norm(x["k"][0])  # [T, 1, K]
    g = ref_gate(x["g"], x["A_log"], x["dt_bias"], "safe", lower_bound)[0]  # [T, HV, K]
    beta = ref_beta(x["beta"], "logits")[0]  # [T, HV]
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        for r0 in range(s, e, 64):
            n = min(64, e - r0)
            qc, kc = q[r0:r0 + n, 0], k[r0:r0 + n, 0]
            for hv in range(heads):
                G = g[r0:r0 + n, hv].cumsum(0)
                decay = torch.exp(G[:, None, :] - G[None, :, :])  # [i, j, K]; used where j <= i only
                P = torch.tril((kc[:, None, :] * kc[None, :, :] * decay).sum(-1), -1)
                Aqk = torch.tril((qc[:, None, :] * kc[None, :, :] * decay).sum(-1))
                b = beta[r0:r0 + n, hv]
                X = torch.linalg.inv(torch.eye(n, dtype=f64) + b[:, None] * P)
                yield dict(r0=r0, n=n, hv=hv, G=G, k=kc, beta=b, P=P, Aqk=Aqk, X=X)


@pytest.mark.slow
def test_kept_chunk_matrices_against_float64(monkeypatch):
    """saved=: P (A_kk without beta, strictly lower), A_qk without the scale (lower with the diagonal) and
    X = (I + diag(beta) P)^-1 of every chunk, fp32 [NT, HV, 64, 64], on L2-normalised q/k with the safe gate and
    beta logits, packed lengths 70, 1, 129 (2 + 1 + 3 chunks), GVA 1 -> 2, odd K: each chunk's matrices against
    float64 built from the inputs, zero past its rows and above the diagonal (X the identity past its rows; the
    kernels write those zeros themselves: every buffer kda_chunk allocates starts as NaN here); and keeping them
    changes neither o nor the final state but through the solve's precision (tf32x3 for the kept fp32 X: the same
    bits as a call without them with the solve in tf32x3). The bar: 1e-4 under the interpreter (fp32 products), 2e-3
    on a GPU, where the pair products are tf32 (operands rounded to 2^-11: P 2e-4 off in absolute terms, its
    largest entry 0.22, on the H100)."""
    cu = torch.tensor([0, 70, 71, 200])
    x = make(1, 200, 1, 2, 24, 20, seed=23, gate="safe", n_seqs=3)
    x["beta"] = torch.randn(x["beta"].shape, generator=torch.Generator().manual_seed(12)).to(x["beta"])
    opts = KDAOptions(use_qk_l2norm=True, gate="safe", lower_bound=-3.0, beta="logits", output_final_state=True)
    dv = lambda t: t.to(DEVICE)
    args = (dv(x["q"]), dv(x["k"]), dv(x["v"]), dv(x["g"]), dv(x["beta"]), opts)
    kw = dict(A_log=dv(x["A_log"]), dt_bias=dv(x["dt_bias"]), initial_state=dv(x["h0"]), cu_seqlens=dv(cu))
    kept = {}
    with nan_filled_empty():
        o, ht = kda_chunk(*args, **kw, saved=kept)
    from kda_trace.kernels import chunk

    with monkeypatch.context() as m:
        m.setitem(chunk.LAUNCH, "solve_inv_precision", "tf32x3")
        m.setitem(chunk.LAUNCH, "solve_merge_precision", "tf32x3")
        o2, ht2 = kda_chunk(*args, **kw)
    assert torch.equal(o, o2) and torch.equal(ht, ht2)
    assert all(kept[n].shape == (6, 2, 64, 64) and kept[n].dtype == torch.float32 for n in ("P", "Aqk", "X"))
    bar = 1e-4 if DEVICE == "cpu" else 2e-3
    item = -1
    for c in chunk_truth(x, cu, heads=2, lower_bound=-3.0):
        n, item = c["n"], item + (c["hv"] == 0)
        want = {n_: torch.zeros(64, 64, dtype=f64) for n_ in ("P", "Aqk")}
        want["P"][:n, :n] = c["P"]
        want["Aqk"][:n, :n] = c["Aqk"]
        want["X"] = torch.eye(64, dtype=f64)
        want["X"][:n, :n] = c["X"]
        for name, ref in want.items():
            got = kept[name][item, c["hv"]].cpu().to(f64)
            assert (got - ref).abs().max() <= bar * max(1.0, ref.abs().max()), (name, c["r0"], c["hv"])
            assert torch.equal(got[n:], ref[n:]) and torch.equal(torch.triu(got, 1), torch.triu(ref, 1))
    assert item == 5


@pytest.mark.slow
def test_kept_w_and_kg_against_float64():
    """save_states (bf16 inputs, [K, V] states): the kept W = X diag(beta) k exp(G) and KG = k exp(G_last - G)
    (bf16 [T, HV, K], what the backward's pass reads instead of computing its own) against float64 built from the
    inputs (X = (I + diag(beta) P)^-1 per chunk), on L2-normalised q/k with the safe gate and beta logits, packed
    lengths 70, 1, 129, GVA 1 -> 2, odd K; the kept states and V_new are there too, and a forward without
    save_states keeps neither W nor KG. The bars: 5e-3 of the largest entry (at least 1) and 3e-3 RMS-relative per
    chunk: W and KG are stored as bf16 (2^-9 relative, about 1.1e-3 RMS), W a tf32 product on a GPU."""
    cu = torch.tensor([0, 70, 71, 200])
    x = make(1, 200, 1, 2, 24, 20, seed=24, gate="safe", n_seqs=3, dtype=torch.bfloat16)
    opts = KDAOptions(use_qk_l2norm=True, gate="safe", lower_bound=-3.0, beta="logits", output_final_state=True)
    dv = lambda t: t.to(DEVICE)
    args = (dv(x["q"]), dv(x["k"]), dv(x["v"]), dv(x["g"]), dv(x["beta"]), opts)
    kw = dict(A_log=dv(x["A_log"]), dt_bias=dv(x["dt_bias"]), initial_state=dv(x["h0"]), cu_seqlens=dv(cu))
    plain = {}
    kda_chunk(*args, **kw, saved=plain)
    assert "W" not in plain and "KG" not in plain and "states" not in plain
    kept = {}
    kda_chunk(*args, **kw, saved=kept, save_states=True)
    assert {"states", "Vn", "W", "KG"} <= set(kept)
    assert all(kept[n].shape == (200, 2, 24) and kept[n].dtype == torch.bfloat16 for n in ("W", "KG"))
    W, KG = kept["W"].cpu().to(f64), kept["KG"].cpu().to(f64)
    for c in chunk_truth(x, cu, heads=2, lower_bound=-3.0):
        r0, n, hv, G, kc = c["r0"], c["n"], c["hv"], c["G"], c["k"]
        want = {"W": c["X"] @ (c["beta"][:, None] * kc * torch.exp(G)), "KG": kc * torch.exp(G[-1] - G)}
        for name, got in (("W", W[r0:r0 + n, hv]), ("KG", KG[r0:r0 + n, hv])):
            ref = want[name]
            assert (got - ref).abs().max() <= 5e-3 * max(1.0, ref.abs().max()), (name, r0, hv)
            if n > 1:  # a one-row chunk: a few bf16 roundings, no RMS to speak of
                assert rms_rel(got, ref) < 3e-3, (name, r0, hv, rms_rel(got, ref))


def test_adapter_prefill_chunk_states_vs_family_reference():
    """The prefill_chunk_states family's reference vs our adapter: the chunked path (100 tokens) and the
    token-by-token path of a batch of at most 64 tokens, whose chunk states are the initial states."""
    from kda_trace.solutions import ours_chunk

    H, HV, K, V = 1, 2, 16, 16
    ref = load_reference("prefill_chunk_states", NUM_HEADS=H, NUM_V_HEADS=HV, HEAD_DIM_K=K, HEAD_DIM_V=V,
                         LOWER_BOUND=-5.0)
    tags = ["stage:prefill_chunk_states", "feature:chunk_states", "beta:logits", "qk_norm:l2", "state_layout:vk",
            "gate:safe", "lower_bound:-5"]
    run = ours_chunk.build(FakeDefinition(f"kda_prefill_h{H}_d{K}_k_last_safe_gate_chunk_states", tags,
                                          "initial_state"))
    gen = torch.Generator().manual_seed(22)
    r = lambda *s: torch.randn(*s, generator=gen)
    bf = torch.bfloat16
    for lens in ([70, 30], [5, 20]):
        T = sum(lens)
        inputs = {"q": r(T, H, K).to(bf), "k": r(T, H, K).to(bf), "v": r(T, HV, V).to(bf),
                  "g_raw": r(T, HV, K).to(bf), "A_log": r(HV) * 0.5, "dt_bias": r(HV, K), "b": r(T, HV).to(bf),
                  "initial_state": r(2, HV, V, K), "cu_seqlens": torch.tensor([0, lens[0], T]), "scale": K ** -0.5}
        want = ref.run(**{n: (x.float() if n == "v" else x) for n, x in inputs.items()})
        got = run(**{n: x.to(DEVICE) if torch.is_tensor(x) else x for n, x in inputs.items()})
        assert len(got) == 3 and got[2].shape == want[2].shape == (sum(-(-n // 64) for n in lens), HV, V, K)
        for w, g in zip(want, got):
            assert rms_rel(g.cpu(), w) <= BUDGET, lens
