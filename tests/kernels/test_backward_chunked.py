"""The chunked mode of the backward (kernels/backward.py LAUNCH["mode"] = "chunked": kernels/backward_chunked.py's
prep, state/dS pass and split local kernels; the other local kernels once each) against float64 autograd through the independent
token recurrence (test_backward.py's `truth`), under the Triton interpreter on tiny shapes.

Bars. The interpreter computes every product in fp32 (the tf32x3 / tf32 precisions of a GPU are not modelled),
so float32 inputs are held to test_backward.py's fp32 bar (RMS-relative 1e-5; measured about 1e-7 to 1e-6)
and float64 inputs to 1e-12: a wrong term (a missing decay, a wrong chunk's state, a sequence leaking into the
next) costs 1e-2 or more. bf16 inputs: the gradients are returned in bf16 (dq, dk, dv, dbeta; rounding alone
is about 2e-3 RMS-relative), and fla's chunk_kda reaches 2.8e-3 to 3.3e-3 on each gradient on the H100
(benchmarks/RESULTS.md): the bar is 1e-2, "no worse than fla's" with room for the bf16 output rounding. On a
GPU the accuracy at tf32 precision is for benchmarks/bench_backward.py --accuracy --launch mode=chunked.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from kda_trace.platform import default_device, ensure_triton_can_run

DEVICE = default_device()
ensure_triton_can_run(DEVICE)  # before triton is imported: the interpreter on a machine without a GPU

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import triton.runtime.errors  # noqa: E402

from launch_spy import LaunchSpy  # noqa: E402
from test_backward import assert_scale_passed_as_tensor, check, f64, make, rms_rel, truth  # noqa: E402

from kda_trace.kernels import backward  # noqa: E402
from kda_trace.kernels.chunk import _tf32_rn  # noqa: E402
from kda_trace.kernels.common import dot_precision  # noqa: E402
from kda_trace.kernels.options import KDAOptions  # noqa: E402


@pytest.fixture(autouse=True)
def chunked_mode(monkeypatch):
    monkeypatch.setitem(backward.LAUNCH, "mode", "chunked")


def test_dense_odd_dims_two_chunks_v_tiles(monkeypatch):
    """B = 2 rows of 70 tokens (a full chunk and a 6-token one), K = 20, V = 36, h0 and dht; `_local_vk_kernel`'s
    sums over V-tiles of 16 (three, the last 4 columns wide) and K-tiles of 16 (two, the second 4 columns wide),
    `_local_k_kernel` in K-tiles of 16."""
    monkeypatch.setitem(backward.LAUNCH, "split_bv", 16)
    monkeypatch.setitem(backward.LAUNCH, "split_bk", 16)
    monkeypatch.setitem(backward.LAUNCH, "split_k_bk", 16)
    check(make(2, 70, 1, 1, 20, 36, seed=1))


def test_packed_varlen_gva_one_token_last_sequence(monkeypatch):
    """Packed [1, 70, 1] tokens (single-token first and last sequences around one of two chunks), GVA 1 -> 2
    value heads, K = 12, V = 20, no dht; 3 persistent programs for the 8 (chunk, value head) items."""
    monkeypatch.setitem(backward.LAUNCH, "programs", 3)
    x = make(1, 72, 1, 2, 12, 20, seed=2, n_seqs=3)
    check(x, cu_seqlens=torch.tensor([0, 1, 71, 72]), use_dht=False)


def test_strong_gates_no_initial_state_vk_layout():
    """g uniform in [-8, 0] per step with no bias (G reaches about -256 over a chunk: e(-G) would overflow
    fp32), three chunks, K = 16, V = 24, [V, K] states, no h0."""
    x = make(1, 150, 1, 1, 16, 24, seed=3, g_low=-8.0)
    check(x, KDAOptions(state_layout="vk", scale=0.7), use_h0=False)


def test_k_tiles():
    """K = 130: four K-tiles of 64 in the pass, the prep and the split local kernels, the last with 2 valid
    columns (the other cases have one tile), V = 20, packed [66, 4] tokens."""
    check(make(1, 70, 1, 1, 130, 20, seed=11, n_seqs=2), cu_seqlens=torch.tensor([0, 66, 70]))


def test_single_token_sequences():
    check(make(3, 1, 1, 1, 8, 5, seed=4))


def test_float64_inputs():
    """float64 inputs: every product in float64 (ieee), two packed sequences, GVA."""
    check(make(1, 80, 1, 2, 6, 7, seed=14, dtype=f64, n_seqs=2), cu_seqlens=torch.tensor([0, 79, 80]), bar=1e-12)


def test_bf16_inputs():
    """bf16 inputs (fp32 compute, bf16 gradients except dg and dh0), two chunks, K = 32, V = 16."""
    check(make(1, 70, 1, 1, 32, 16, seed=5, dtype=torch.bfloat16), bar=1e-2)


@pytest.mark.slow
def test_pass_reads_bf16_copies_with_the_same_gradients(monkeypatch):
    """A pass in bf16 reads W and Kt stored in bf16 (LAUNCH["chunked_pass_bf16_copies"], None: on) by the operands
    kernel with the rounding its products would apply: the gradients are bit-identical to the pass rounding fp32
    W and Kt itself (copies off) under the interpreter; on a GPU the compiled products may sum in another order
    (the H100 gave dh0 not bit-identical, the rest equal): within 1e-5 there. The pass was handed the bf16
    buffers. Three chunks, two packed sequences, GVA, fp32 inputs (the pass in bf16 by the launch key: fp32
    inputs get a tf32 pass by default)."""
    from kda_trace.kernels import backward_chunked

    x = make(1, 150, 1, 2, 32, 24, seed=24, n_seqs=2)
    cu = torch.tensor([0, 130, 150])
    monkeypatch.setitem(backward.LAUNCH, "mode", "chunked")
    monkeypatch.setitem(backward.LAUNCH, "chunked_pass_precision", "bf16")
    spy = LaunchSpy(backward_chunked._state_pass_kernel)
    monkeypatch.setattr(backward_chunked, "_state_pass_kernel", spy)
    monkeypatch.setitem(backward.LAUNCH, "chunked_pass_bf16_copies", False)
    own = check(x, cu_seqlens=cu, bar=1e-2)
    monkeypatch.setitem(backward.LAUNCH, "chunked_pass_bf16_copies", None)
    copied = check(x, cu_seqlens=cu, bar=1e-2)
    assert [(a[0].dtype, a[3].dtype) for a in spy.calls] == [(torch.float32, torch.float32),  # W, Kt
                                                             (torch.bfloat16, torch.bfloat16)]
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        a, b = getattr(copied, name), getattr(own, name)
        assert torch.equal(a, b) if DEVICE == "cpu" else rms_rel(a, b) < 1e-5, (name, rms_rel(a, b))


@pytest.mark.slow
def test_gradients_written_in_the_inputs_dtype(monkeypatch):
    """Without GVA the local kernels write dq, dk and dv in the inputs' dtype (bf16 here, rounded to nearest even
    in the kernel): under the interpreter bit for bit what torch's cast gives of the fp32 gradients of the same
    values in fp32 inputs; with GVA dq and dk stay fp32 until their group sum. On a GPU the kernels compiled for
    bf16 and fp32 inputs may sum in other orders (the H100 gave dg apart in its last bits, the rest equal), so
    there the two runs are held within bf16's rounding of each other. Two chunks, dense; each run also against
    float64 (the chunked mode's bar on a GPU: tf32 products)."""
    monkeypatch.setitem(backward.LAUNCH, "mode", "chunked")
    for HV in (1, 2):
        x32 = make(1, 100, 1, HV, 32, 24, seed=25 + HV)
        x32 = {n: t.bfloat16().float() if n in ("q", "k", "v", "beta", "do") else t for n, t in x32.items()}
        x16 = {n: t.bfloat16() if n in ("q", "k", "v", "beta") else t for n, t in x32.items()}
        g32, g16 = check(x32, bar=1e-2), check(x16, bar=1e-2)
        same = (lambda a, b: torch.equal(a, b)) if DEVICE == "cpu" else (lambda a, b: rms_rel(a, b) < 4e-3)
        for name in ("dq", "dk", "dv", "dbeta"):
            got, want = getattr(g16, name), getattr(g32, name).bfloat16()
            assert got.dtype == torch.bfloat16 and same(got, want), (HV, name)
        assert same(g16.dg, g32.dg) and same(g16.dh0, g32.dh0), HV


@pytest.mark.slow
def test_the_pass_source_product_keeps_dh0(monkeypatch):
    """chunked_pass_source_precision: the pass in bf16 but for the reverse recursion's Qt^T dO in fp32 (tf32 on a
    GPU, the default there), or as two bf16 products of Qt's two bf16 terms with a bf16 dO ("bf16_split_a"). dh0's
    error against float64 is then a fraction of the all-bf16 pass's (Qt^T dO is where dh0's rounding error comes
    from: benchmarks/pass_rounding_estimate.py), while dq still takes the forward recursion's rounding."""
    x = make(1, 330, 1, 1, 32, 24, seed=22)
    ref = truth(x, 32 ** -0.5, None, True, True)
    base = check(x)
    monkeypatch.setitem(backward.LAUNCH, "chunked_pass_precision", "bf16")
    monkeypatch.setitem(backward.LAUNCH, "chunked_pass_source_precision", "bf16")
    rounded = check(x, bar=1e-2)
    monkeypatch.setitem(backward.LAUNCH, "chunked_pass_source_precision", None)  # tf32 with a bf16 pass
    mixed = check(x, bar=1e-2)
    monkeypatch.setitem(backward.LAUNCH, "chunked_pass_source_precision", "bf16_split_a")
    x16 = {n: t.bfloat16().float() if n == "do" else t for n, t in x.items()}  # the split is exact for a bf16 dO
    split = check(x16, bar=1e-2)
    ref16 = truth(x16, 32 ** -0.5, None, True, True)
    err = {name: rms_rel(gr.dh0, ref["h0"]) for name, gr in (("base", base), ("rounded", rounded), ("mixed", mixed))}
    err["split"] = rms_rel(split.dh0, ref16["h0"])
    assert err["mixed"] < 0.3 * err["rounded"] and err["split"] < 0.3 * err["rounded"], err
    assert not torch.equal(mixed.dh0, base.dh0) and not torch.equal(mixed.dq, base.dq)


@pytest.mark.parametrize("keys", [("chunked_precision",), ("split_precision",), ("pairs_diag_precision",),
                                  ("chunked_pass_precision", "chunked_pass_source_precision")])
@pytest.mark.slow
def test_products_in_bf16(keys, monkeypatch):
    """The prep's (chunked_precision, pairs_diag_precision), the local kernels' (split_precision) or the pass's
    products with bf16 operands: fp32 inputs over three chunks, two packed sequences, GVA, held to the bf16 bar
    (1e-2) and differing from the tf32 products' gradients (fp32 under the interpreter: the rounding is applied); a
    precision that `_xdot` does not know is refused before any launch."""
    x = make(1, 150, 1, 2, 32, 24, seed=21, n_seqs=2)
    cu = torch.tensor([0, 130, 150])
    for key in keys:
        monkeypatch.setitem(backward.LAUNCH, key, "tf32")
    base = check(x, cu_seqlens=cu)
    for key in keys:
        monkeypatch.setitem(backward.LAUNCH, key, "bf16")
    rounded = check(x, cu_seqlens=cu, bar=1e-2)
    assert not torch.equal(rounded.dq, base.dq) and not torch.equal(rounded.dg, base.dg)
    monkeypatch.setitem(backward.LAUNCH, keys[0], "fp16")
    with pytest.raises(ValueError, match="tf32, tf32_rn, tf32x3, ieee, bf16 or bf16_split_a"):
        check(x, cu_seqlens=cu)


@triton.jit
def _round_kernel(x, y, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(y + o, _tf32_rn(tl.load(x + o)))


def test_tf32_rounding_to_nearest():
    """chunk.`_tf32_rn` (the "tf32_rn" products' operand rounding, run here by the interpreter) against
    float64 rounding to 10 fraction bits, ties to even, over 60 decades, signs, ties and non-finite values; under the
    interpreter "tf32_rn" products are fp32 ones, as its "tf32" are."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(1024, generator=gen) * torch.logspace(-30, 30, 1024)
    x[:6] = torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11 + 2 ** -20), 3.0e38, float("inf"),
                          -float("inf")])
    y = torch.empty_like(x)
    _round_kernel[(1,)](x, y, N=1024)
    # ties to even, a value just past a tie, infinities kept (3.0e38, near the largest fp32: checked below)
    assert y[[0, 1, 2, 4, 5]].tolist() == [1.0, 1 + 2 ** -9, -(1 + 2 ** -10), float("inf"), -float("inf")]
    mant, exp = torch.frexp(x.double())
    want = torch.ldexp(torch.round(mant * 2 ** 11) / 2 ** 11, exp)  # torch.round: half to even
    assert torch.equal(y.double(), want)
    assert dot_precision("tf32_rn", True) == "tf32" and dot_precision("tf32_rn", False) == "tf32_rn"


SPLIT_PREP_CASES = {
    # packed [1, 70, 1] tokens, GVA 1 -> 2, odd K and V, 3 persistent programs for the pairs kernel's 8 items, the
    # operands kernel's V-tiles of 16 (the last 4 wide)
    "packed_gva_odd": (lambda: make(1, 72, 1, 2, 12, 36, seed=2, n_seqs=3), dict(cu_seqlens=torch.tensor([0, 1, 71, 72])),
                       {"programs": 3, "prep_bv": 16}),
    # K = 130: three K-tiles of 64 in the operands kernel, the last with 2 valid columns; two sequences
    "k_tiles": (lambda: make(1, 70, 1, 1, 130, 20, seed=11, n_seqs=2), dict(cu_seqlens=torch.tensor([0, 66, 70])), {}),
    # g in [-8, 0] per step, float64 (ieee products), [V, K] states, no h0
    "float64_strong_gates": (lambda: make(1, 150, 1, 1, 16, 24, seed=3, g_low=-8.0, dtype=f64),
                             dict(opts=KDAOptions(state_layout="vk", scale=0.7), use_h0=False, bar=1e-12), {}),
}


def _alternative_matches(case, key, alternative, default, monkeypatch, launch_extra=None):
    """LAUNCH[key] = alternative against float64 autograd at the usual bars (check) and against LAUNCH[key] =
    default: the gradients of the two within 1e-6 of the largest (the same products, fp32 roundings in another
    order at most). Returns both gradients (alternative, default)."""
    make_x, kwargs, launch = SPLIT_PREP_CASES[case]
    for k, val in {**launch, **(launch_extra or {})}.items():
        monkeypatch.setitem(backward.LAUNCH, k, val)
    x = make_x()
    monkeypatch.setitem(backward.LAUNCH, key, alternative)
    alt = check(x, **kwargs)
    monkeypatch.setitem(backward.LAUNCH, key, default)
    base = check(x, **kwargs)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        a, b = getattr(alt, name), getattr(base, name)
        if b is None:
            assert a is None
            continue
        assert (a - b).abs().max() <= 1e-6 * b.abs().max(), name
    return alt, base


# float64_strong_gates in the fast tier (test_anchored_diagonal_blocks), the other cases in the slow one
SPLIT_PREP_PARAMS = [c if c == "float64_strong_gates" else pytest.param(c, marks=pytest.mark.slow)
                     for c in sorted(SPLIT_PREP_CASES)]


@pytest.mark.parametrize("case", SPLIT_PREP_PARAMS)
def test_anchored_diagonal_blocks(case, monkeypatch):
    """LAUNCH["diag_blocks"] = "anchors" (the diagonal blocks of the pair matrices and the block sums as tensor-core
    products at two anchors, the default) against "elementwise", both against float64 autograd; sums_bk 16 makes
    K-tiles of the sums whose last is partly masked (K = 12, 130) and, on the packed case, more work items than the
    3 persistent programs. The two differ (other roundings), which shows that the anchored products ran."""
    a, b = _alternative_matches(case, "diag_blocks", "anchors", "elementwise", monkeypatch, {"sums_bk": 16})
    if case != "float64_strong_gates":  # (there, every block of the strong gates may fall back)
        assert not torch.equal(a.dq, b.dq) and not torch.equal(a.dk, b.dk)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SPLIT_PREP_CASES))
def test_sums_in_one_launch(case, monkeypatch):
    """LAUNCH["sums_one_launch"]: every (work item, row block) of the sums kernel in one launch gives the same bits
    as one launch per row block (the same code per block), and passes against float64 autograd; with sums_bk 16 and
    the packed case's 3 persistent programs, each program runs blocks of several items and K-tiles."""
    a, b = _alternative_matches(case, "sums_one_launch", True, False, monkeypatch, {"sums_bk": 16})
    for name in ("dq", "dk", "dv", "dg", "dbeta"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SPLIT_PREP_CASES))
def test_vk_sums_by_k_tiles(case, monkeypatch):
    """LAUNCH["split_vk_ktiles"]: 3a's K-tiles by `_local_kt_kernel` (one program per chunk, value head and K-tile)
    and the rest by `_local_vk_kernel` from its Y_k: the same bits as every K-tile inside `_local_vk_kernel` (the
    same products in the same order), and against float64 autograd; split_bk 16 makes several K-tiles, the last
    partly masked at K = 12 and K = 130."""
    from kda_trace.kernels import backward_chunked

    spy = LaunchSpy(backward_chunked._local_kt_kernel)
    monkeypatch.setattr(backward_chunked, "_local_kt_kernel", spy)
    a, b = _alternative_matches(case, "split_vk_ktiles", True, False, monkeypatch, {"split_bk": 16})
    for name in ("dq", "dk", "dv", "dg", "dbeta"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    K = SPLIT_PREP_CASES[case][0]()["q"].shape[-1]
    assert len(spy.grids) == 1 and spy.grids[0][0] % -(-K // 16) == 0  # once, for the alternative only


def _strong_gates(dtype):
    """Gates down to -60 per step in the second chunk (a two-anchor factor across a block would be e(900)), a single
    -300 step, mild gates elsewhere; two packed sequences with ragged last blocks, GVA, K = 20."""
    x = make(1, 150, 1, 2, 20, 24, seed=14, n_seqs=2, g_low=-2.0, dtype=dtype)
    x["g"][:, 64:128] = (torch.rand(1, 64, 2, 20, generator=torch.Generator().manual_seed(6)) * -60.0).to(dtype)
    x["g"][:, 100, 0, 3] = -300.0
    return x, torch.tensor([0, 93, 150])


# the nested form in the fast tier; the two anchors' fall-backs (also under test_every_block_of_the_sums_by_running_products
# and test_the_fall_back_in_a_pass_of_its_own) in the slow one
@pytest.mark.parametrize("form", [{"diag_blocks": "nested"},
                                  pytest.param({"diag_blocks": "anchors", "sums_steps_pass": False}, marks=pytest.mark.slow),
                                  pytest.param({"diag_blocks": "anchors", "sums_steps_pass": True}, marks=pytest.mark.slow)])
@pytest.mark.parametrize("dtype", [torch.float32, f64])
def test_diagonal_blocks_past_the_two_anchors_range(dtype, form, monkeypatch):
    """The sums' diagonal blocks at nested anchors (backward_blocks.py `_diag_sums_nested`, every factor <= 1), or at
    two with their fall-back inside the sums kernel or in a pass of its own, and the prep's pairs recomputed (no chunk
    matrices given: their fall-back at nested anchors), on `_strong_gates` with K-tiles of 16 (the last masked): the
    usual bars against float64, and within a tenth of them of the element-wise form."""
    for key, val in form.items():
        monkeypatch.setitem(backward.LAUNCH, key, val)
    monkeypatch.setitem(backward.LAUNCH, "sums_bk", 16)
    x, cu = _strong_gates(dtype)
    bar = 1e-12 if dtype == f64 else 1e-5
    got = check(x, cu_seqlens=cu, bar=bar)
    monkeypatch.setitem(backward.LAUNCH, "diag_blocks", "elementwise")
    plain = check(x, cu_seqlens=cu, bar=bar)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        assert rms_rel(getattr(got, name), getattr(plain, name)) <= bar / 10, name


def test_strong_gates_choose_nested_anchors(monkeypatch):
    """LAUNCH["diag_blocks"] None: `kda_backward(strong_gates=True)` (kernels/autograd.py passes it for the unbounded
    gate in the op) launches the sums kernel with its diagonal blocks at nested anchors and no pass of its own for a
    fall-back; without it, two anchors and the pass; the gradients agree to fp32 rounding; "nested" and "anchors"
    choose either way whatever strong_gates says."""
    from kda_trace.kernels import backward_chunked
    from kda_trace.kernels.backward_chunked import _nested

    spy = LaunchSpy(backward_chunked._local_sums_kernel)
    monkeypatch.setattr(backward_chunked, "_local_sums_kernel", spy)
    assert backward.LAUNCH["diag_blocks"] is None and backward.LAUNCH["sums_steps_pass"]
    x, cu = _strong_gates(torch.float32)
    dev = lambda t: t.to(DEVICE)  # noqa: E731
    args = [dev(x[n]) for n in ("q", "k", "v", "g", "beta", "do")]
    grads = {}
    for strong in (True, False):
        grads[strong] = backward.kda_backward(*args, initial_state=dev(x["h0"]), dht=dev(x["dht"]),
                                              cu_seqlens=dev(cu), strong_gates=strong)
        assert (spy.options[-1]["NESTED"], spy.options[-1]["STEPS"]) == (strong, strong)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        assert rms_rel(getattr(grads[True], name), getattr(grads[False], name)) <= 1e-6, name
    for setting, strong in itertools.product(("nested", "anchors"), (True, False)):
        assert _nested({"diag_blocks": setting}, strong) == (setting == "nested")
    assert not _nested({"diag_blocks": "elementwise"}, True)


def test_sums_diagonal_precision_default():
    """LAUNCH["sums_diag_precision"] None: plain tf32 for the sums' diagonal blocks at nested anchors (their sixteen
    products per block would spend a quarter of the kernel's time rounding operands), tf32_rn (operands rounded to
    nearest first) at one or two anchors; a setting given is taken as it is."""
    from kda_trace.kernels.backward_chunked import sums_diag_precision

    assert backward.LAUNCH["sums_diag_precision"] is None
    assert sums_diag_precision(backward.LAUNCH, True) == "tf32"
    assert sums_diag_precision(backward.LAUNCH, False) == "tf32_rn"
    for setting in ("tf32x3", "bf16", "tf32_rn"):
        assert sums_diag_precision({"sums_diag_precision": setting}, True) == setting


@pytest.mark.parametrize("form", ["nested", "anchors"])
def test_diagonal_blocks_balanced(form, monkeypatch):
    """The diagonal blocks' products in bf16 (rounded under the interpreter as on a GPU): their rounding is no longer
    exactly balanced between the rows of a pair, and through dG's reverse cumulative sum it would reach every
    earlier row of the chunk. With each block's imbalance taken out (LAUNCH["diag_balance"]) the sums of dg over
    each sequence (what dt_bias's gradient sums; strong gates, where the diagonal blocks carry most of dg) are at
    least 3 times closer to float64 than without, and dg itself is no further from it."""
    monkeypatch.setitem(backward.LAUNCH, "diag_blocks", form)
    monkeypatch.setitem(backward.LAUNCH, "sums_diag_precision", "bf16")
    x = make(1, 192, 1, 2, 32, 24, seed=31, n_seqs=2, g_low=-6.0)
    cu = torch.tensor([0, 150, 192])
    ref = truth(x, KDAOptions().resolved_scale(32), cu)["g"]

    def per_sequence(dg):
        return torch.stack([dg[0, a:b].double().sum(0) for a, b in ((0, 150), (150, 192))])

    errs = {}
    for balance in (True, False):
        monkeypatch.setitem(backward.LAUNCH, "diag_balance", balance)
        gr = backward.kda_backward(*(x[n].to(DEVICE) for n in ("q", "k", "v", "g", "beta", "do")),
                                   initial_state=x["h0"].to(DEVICE), dht=x["dht"].to(DEVICE), cu_seqlens=cu.to(DEVICE))
        errs[balance] = (rms_rel(per_sequence(gr.dg.cpu()), per_sequence(ref)), rms_rel(gr.dg.cpu(), ref))
    assert errs[True][0] * 3 <= errs[False][0], errs
    assert errs[True][1] <= errs[False][1] * 1.05, errs


def test_diagonal_balance_default():
    """LAUNCH["diag_balance"] None: on with the anchored blocks (two or nested anchors), off at one anchor (a known
    gate bound of the safe gate's size) and with the element-wise blocks (exact in fp32); True / False as set."""
    from kda_trace.kernels.backward_chunked import _balance

    launch = dict(backward.LAUNCH, diag_balance=None, diag_blocks=None, sums_one_anchor=True)
    assert _balance(launch, None) and not _balance(launch, -5.0)
    assert _balance(dict(launch, sums_one_anchor=False), -5.0)
    assert not _balance(dict(launch, diag_blocks="elementwise"), None)
    assert _balance(dict(launch, diag_balance=True), -5.0) and not _balance(dict(launch, diag_balance=False), None)


@pytest.mark.parametrize("dtype", [pytest.param(torch.float32, marks=pytest.mark.slow), f64])
def test_anchored_blocks_fall_back_past_max_exp(dtype, monkeypatch):
    """Gates down to -20 per step in the second chunk (each of its blocks has a half whose decay passes e(70),
    beyond MAX_EXP = 60: those blocks take the element-wise form) and to -4 in the others (anchored): the usual
    bars. In fp32, with the fall-back disabled (MAX_EXP raised past any range) the same inputs overflow."""
    from kda_trace.kernels import backward_chunked

    x = make(1, 150, 1, 1, 16, 24, seed=21, g_low=-4.0, dtype=dtype)
    x["g"][:, 64:128] = (torch.rand(1, 64, 1, 16, generator=torch.Generator().manual_seed(5)) * -20.0).to(dtype)
    bar = 1e-12 if dtype == f64 else 1e-5
    check(x, bar=bar)
    if dtype == torch.float32:
        monkeypatch.setattr(backward_chunked, "MAX_EXP", tl.constexpr(1e9))
        with pytest.raises(AssertionError, match="non-finite"):
            check(x, bar=bar)


@pytest.mark.parametrize("dtype", [pytest.param(torch.float32, marks=pytest.mark.slow), f64])
def test_every_block_of_the_sums_by_running_products(dtype, monkeypatch):
    """With MAX_EXP below any block's range, every diagonal block of the sums takes the fall-back
    (`_diag_sums_by_steps`: decays as running products of the gates' exps, rows and columns by pair index):
    the usual bars against float64 on two packed sequences with ragged last blocks, GVA and K = 20 (K-tiles of 16,
    the last masked), and gradients unlike the anchored products' (the fall-back ran)."""
    from kda_trace.kernels import backward_chunked

    monkeypatch.setitem(backward.LAUNCH, "sums_bk", 16)
    x = make(1, 150, 1, 2, 20, 24, seed=12, n_seqs=2, g_low=-3.0, dtype=dtype)
    cu = torch.tensor([0, 93, 150])
    bar = 1e-12 if dtype == f64 else 1e-5
    anchored = check(x, cu_seqlens=cu, bar=bar)
    monkeypatch.setattr(backward_chunked, "MAX_EXP", tl.constexpr(-1.0))
    steps = check(x, cu_seqlens=cu, bar=bar)
    assert not torch.equal(steps.dg, anchored.dg) and not torch.equal(steps.dq, anchored.dq)


@pytest.mark.parametrize("dtype", [pytest.param(torch.float32, marks=pytest.mark.slow), f64])
def test_the_fall_back_in_a_pass_of_its_own(dtype, monkeypatch):
    """LAUNCH["sums_steps_pass"]: the sums kernel without its fall-back, the blocks past the anchored range flagged
    and their diagonal parts added by `_diag_steps_kernel`. With no block past the range, the same gradients as the
    fall-back inside the kernel, bit for bit; with every block past it (MAX_EXP below any block's range), the usual
    bars against float64 and the same gradients but for rounding (the diagonal part is added last). The pass with
    its steps unrolled four at a time (LAUNCH["sums_steps_unroll"]) gives the same bits as without."""
    from kda_trace.kernels import backward_chunked

    spy = LaunchSpy(backward_chunked._diag_steps_kernel)
    monkeypatch.setattr(backward_chunked, "_diag_steps_kernel", spy)
    monkeypatch.setitem(backward.LAUNCH, "sums_bk", 16)
    x = make(1, 150, 1, 2, 20, 24, seed=12, n_seqs=2, g_low=-3.0, dtype=dtype)
    cu = torch.tensor([0, 93, 150])
    bar = 1e-12 if dtype == f64 else 1e-5
    close = 1e-12 if dtype == f64 else 1e-5
    flagged = []  # the flags each pass of its own read
    for every_block_past in (False, True):
        if every_block_past:
            monkeypatch.setattr(backward_chunked, "MAX_EXP", tl.constexpr(-1.0))
        monkeypatch.setitem(backward.LAUNCH, "sums_steps_pass", False)
        inside = check(x, cu_seqlens=cu, bar=bar)
        monkeypatch.setitem(backward.LAUNCH, "sums_steps_pass", True)
        apart = check(x, cu_seqlens=cu, bar=bar)
        flagged.append(int(spy.calls[-1][12].sum()))
        if every_block_past:  # where the pass has work
            monkeypatch.setitem(backward.LAUNCH, "sums_steps_unroll", 4)
            unrolled = check(x, cu_seqlens=cu, bar=bar)
            monkeypatch.setitem(backward.LAUNCH, "sums_steps_unroll", 1)
            for name in ("dq", "dk", "dv", "dg", "dbeta"):
                assert torch.equal(getattr(unrolled, name), getattr(apart, name)), f"unrolled {name}"
        for name in ("dq", "dk", "dv", "dg", "dbeta"):
            a, b = getattr(apart, name), getattr(inside, name)
            if every_block_past:
                assert rms_rel(a, b) <= close, name
            else:
                assert torch.equal(a, b), name
    n_flags = spy.calls[-1][12].numel()  # (chunk, head, K-tile, row block)s
    assert len(spy.calls) == 3 and flagged == [0, n_flags], flagged


@pytest.mark.parametrize("dtype", [torch.float32, f64])
@pytest.mark.slow
def test_sums_at_one_anchor_under_a_gate_bound(dtype, monkeypatch):
    """LAUNCH["sums_one_anchor"] with gate_bound -7.5 and gates in [-7.5, 0] (a block's half spans up to 8 gates:
    e(60) = e(MAX_EXP) at the limit): the usual bars against float64 on two packed sequences, GVA, K = 20 (K-tiles
    of 16, the last masked), and gradients unlike the two-anchor form's (the one-anchor products ran); with no
    bound, a bound past -7.5 or the key off, the two-anchor form's gradients exactly."""
    from kda_trace.kernels.backward_chunked import one_anchor

    monkeypatch.setitem(backward.LAUNCH, "sums_bk", 16)
    x = make(1, 150, 1, 2, 20, 24, seed=8, n_seqs=2, g_low=-7.5, dtype=dtype)
    assert x["g"].min() >= -7.5
    cu = torch.tensor([0, 100, 150])
    bar = 1e-12 if dtype == f64 else 1e-5
    assert backward.LAUNCH["sums_one_anchor"]  # on by default
    monkeypatch.setitem(backward.LAUNCH, "sums_one_anchor", False)
    base = check(x, cu_seqlens=cu, bar=bar, gate_bound=-7.5)
    monkeypatch.setitem(backward.LAUNCH, "sums_one_anchor", True)
    one = check(x, cu_seqlens=cu, bar=bar, gate_bound=-7.5)
    assert not torch.equal(one.dq, base.dq) and not torch.equal(one.dg, base.dg)
    for bound in (None, -7.6):
        other = check(x, cu_seqlens=cu, bar=bar, gate_bound=bound)
        assert torch.equal(other.dq, base.dq) and torch.equal(other.dg, base.dg), bound
    launch = {"sums_one_anchor": True, "diag_blocks": "anchors"}
    assert one_anchor(launch, -5.0) and one_anchor(launch, -7.5) and not one_anchor(launch, -7.6)
    assert not one_anchor(launch, None) and not one_anchor({**launch, "diag_blocks": "elementwise"}, -5.0)
    assert not one_anchor({**launch, "sums_one_anchor": False}, -5.0)


@pytest.mark.parametrize("case", ["packed_gva_odd", "k_tiles"])
@pytest.mark.slow
def test_pass_directions_in_parallel(case, monkeypatch):
    """LAUNCH["chunked_pass_parallel"] (the pass's two recursions as separate programs, the default) against one
    program running both: the same products, so the same gradients."""
    _alternative_matches(case, "chunked_pass_parallel", True, False, monkeypatch)


@pytest.mark.parametrize("case", ["packed_gva_odd", pytest.param("k_tiles", marks=pytest.mark.slow)])
def test_pass_reads_a_step_ahead_with_the_same_bits(case, monkeypatch):
    """LAUNCH["chunked_pass_prefetch"] (None: on): the reverse recursion reads each chunk's dO2 tile and gamma one
    step ahead, the first chunk of a sequence reading nothing for the chunk before it; the same operations, so the
    same bits as reading them in the step (single-token sequences; K = 130, four K-tiles of gamma)."""
    assert backward.LAUNCH["chunked_pass_prefetch"] is None
    ahead, inside = _alternative_matches(case, "chunked_pass_prefetch", None, False, monkeypatch)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        a, b = getattr(ahead, name), getattr(inside, name)
        assert (a is None and b is None) or torch.equal(a, b), name


class _StagesRefused:
    """Stands in for a kernel: a launch at the `refused` pipeline stages (a number, or None for Triton's default)
    raises OutOfResources, as on an H100 where they need more shared memory than it has (the pass at two stages with
    an fp32 do or K > 128, benchmarks/probe_pass_launch.py; `_local_vk_kernel` at the default with fp32 inputs at
    K = 100, V = 60); other launches run the real kernel. `stages`: each launch's setting."""

    def __init__(self, real, refused):
        self.real, self.refused, self.stages = real, refused, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.stages.append(kwargs.get("num_stages"))
            if kwargs.get("num_stages") == self.refused:
                raise triton.runtime.errors.OutOfResources(262144, 232448, "shared memory")
            return self.real[grid](*args, **kwargs)
        return launch


@pytest.mark.slow
def test_pass_retries_with_one_stage(monkeypatch):
    """bf16 inputs and do, K <= 128 and few sequence-heads: the pass asks for two stages; where they do not fit it
    runs with one and the gradients are right. A two-stage setting given in LAUNCH is not overridden: the error stands."""
    from kda_trace.kernels import backward_chunked

    fake = _StagesRefused(backward_chunked._state_pass_kernel, 2)
    monkeypatch.setattr(backward_chunked, "_state_pass_kernel", fake)
    x = make(1, 70, 1, 1, 32, 16, seed=5, dtype=torch.bfloat16)
    check(x, bar=1e-2)  # make gives an fp32 do: the pass asks for one stage
    x["do"] = x["do"].to(torch.bfloat16)
    check(x, bar=1e-2)
    assert fake.stages == [1, 2, 1]
    monkeypatch.setitem(backward.LAUNCH, "chunked_pass_stages", 2)
    with pytest.raises(triton.runtime.errors.OutOfResources):
        check(x, bar=1e-2)


def test_local_kernel_retries_with_one_stage(monkeypatch):
    """`_local_vk_kernel` launched at Triton's default stages raises OutOfResources where they need more shared
    memory than the device has (K = 100, V = 60 with fp32 inputs on the H100): it runs again
    with one stage and the gradients are right."""
    from kda_trace.kernels import backward_chunked

    fake = _StagesRefused(backward_chunked._local_vk_kernel, None)
    monkeypatch.setattr(backward_chunked, "_local_vk_kernel", fake)
    check(make(1, 70, 1, 1, 20, 12, seed=8))
    assert fake.stages == [None, 1]


# key -> (kernel, its launches per backward: the sums kernel's row blocks in one launch, LAUNCH["sums_one_launch"];
# the pairs kernel's one per row block)
REGISTER_CAPS = {"sums_maxnreg": ("_local_sums_kernel", 1), "prep_pairs_maxnreg": ("_prep_pairs_kernel", 4),
                 "prep_operands_maxnreg": ("_prep_operands_kernel", 1), "chunked_pass_maxnreg": ("_state_pass_kernel", 1),
                 "split_vk_maxnreg": ("_local_vk_kernel", 1), "split_k_maxnreg": ("_local_k_kernel", 1)}


def _spy_capped_kernels(monkeypatch):
    from kda_trace.kernels import backward_chunked

    spies = {}
    for key, (name, _) in REGISTER_CAPS.items():
        spies[key] = LaunchSpy(getattr(backward_chunked, name))
        monkeypatch.setattr(backward_chunked, name, spies[key])
    return spies


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(REGISTER_CAPS))
def test_register_cap(monkeypatch, key):
    """Each LAUNCH["..._maxnreg"] reaches its kernel's launches (the pairs kernel: four row-block launches) as
    `maxnreg`, and no other kernel's (0: no cap); a register cap changes where ptxas keeps values, not
    the arithmetic: the same gradients (bit for bit under the interpreter, which ignores the cap)."""
    x = make(1, 70, 1, 2, 20, 12, seed=9)
    spies = _spy_capped_kernels(monkeypatch)
    for k in REGISTER_CAPS:
        monkeypatch.setitem(backward.LAUNCH, k, 0)
    base = check(x)
    monkeypatch.setitem(backward.LAUNCH, key, 128)
    capped = check(x)
    for k, spy in spies.items():
        n = REGISTER_CAPS[k][1]
        assert [o.get("maxnreg") for o in spy.options] == [None] * n + [128 if k == key else None] * n, k
    same = (lambda a, b: torch.equal(a, b)) if DEVICE == "cpu" else (lambda a, b: rms_rel(a, b) < 1e-6)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        assert same(getattr(capped, name), getattr(base, name)), name


@pytest.mark.parametrize("dtype, diag_blocks, sums, operands", [
    (torch.float32, "anchors", 128, 168), (torch.float32, "elementwise", None, 168),
    (torch.float64, "anchors", None, None)])
def test_register_cap_defaults(monkeypatch, dtype, diag_blocks, sums, operands):
    """The default caps: the sums kernel at 128 registers and the operands kernel at 168 with fp32 buffers (the
    sums only with the anchored diagonal blocks, which spill 80-120 bytes there against 600-900 element-wise);
    none with float64 buffers, and none on the other kernels."""
    monkeypatch.setitem(backward.LAUNCH, "diag_blocks", diag_blocks)
    spies = _spy_capped_kernels(monkeypatch)
    check(make(1, 40, 1, 1, 20, 12, seed=10, dtype=dtype))
    want = {"sums_maxnreg": sums, "prep_operands_maxnreg": operands}
    for k, spy in spies.items():
        assert {o.get("maxnreg") for o in spy.options} == {want.get(k)}, k


@pytest.mark.slow
def test_token_local_kernel(monkeypatch):
    """The chunked states and dS with the token-step local kernel (LAUNCH["chunked_local"] = "tokens")."""
    monkeypatch.setitem(backward.LAUNCH, "chunked_local", "tokens")
    check(make(1, 70, 1, 2, 10, 12, seed=6, n_seqs=2), cu_seqlens=torch.tensor([0, 65, 70]))


def test_rejects_unknown_modes(monkeypatch):
    x = make(1, 3, 1, 1, 4, 4, seed=7)
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"])
    monkeypatch.setitem(backward.LAUNCH, "chunked_local", "matrx")
    with pytest.raises(ValueError, match="chunked_local"):
        backward.kda_backward(*args)
    monkeypatch.setitem(backward.LAUNCH, "chunked_local", "split")
    monkeypatch.setitem(backward.LAUNCH, "sums_bk", 64)
    with pytest.raises(ValueError, match="sums_bk"):
        backward.kda_backward(*args)
    monkeypatch.setitem(backward.LAUNCH, "sums_bk", None)
    monkeypatch.setitem(backward.LAUNCH, "diag_blocks", "anchor")
    with pytest.raises(ValueError, match="LAUNCH\\['diag_blocks'\\]"):
        check(make(1, 8, 1, 1, 4, 4, seed=0))
    monkeypatch.setitem(backward.LAUNCH, "diag_blocks", "anchors")
    monkeypatch.setitem(backward.LAUNCH, "mode", "chunkd")
    with pytest.raises(ValueError, match="LAUNCH\\['mode'\\]"):
        backward.kda_backward(*args)


@pytest.mark.parametrize("layout", ["kv", "vk"])
@pytest.mark.slow
def test_head_groups_give_the_same_gradients(layout, monkeypatch):
    """A workspace budget of one byte runs the backward one q/k head (with its GVA value heads) at a time:
    3 q/k heads, 6 value heads, packed [5, 66, 1] tokens, h0 and dht. Right against float64 and bit-identical to
    the whole run (each head's arithmetic is the same; only the buffers' head count changes)."""
    x = make(1, 72, 3, 6, 12, 20, seed=21, n_seqs=3)
    cu = torch.tensor([0, 5, 71, 72])
    opts = KDAOptions(state_layout=layout)
    whole = check(x, opts, cu_seqlens=cu) if layout == "kv" else None
    monkeypatch.setitem(backward.LAUNCH, "workspace_bytes", 1)
    sizes = (1, 72, 3, 6, 12, 20, 3)
    assert backward.head_groups(sizes, 3, torch.float32, torch.device("cpu")) == [
        (slice(h, h + 1), slice(2 * h, 2 * h + 2)) for h in range(3)]
    grouped = check(x, opts, cu_seqlens=cu)
    if whole is not None:
        for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
            assert torch.equal(getattr(whole, name), getattr(grouped, name)), name


def test_the_backward_frees_what_the_forward_kept(monkeypatch):
    """kda_autograd's forward keeps its chunk matrices, fp32 states and V_new, W and k exp(G_last - G) for the
    backward (bf16 inputs: LAUNCH["keep_states"]), and q's and k's norm factors. The backward drops each after its
    last reader: when its last kernel (`_local_k_kernel`) runs only the norm factors, which it reads, are alive. A
    second backward through the same graph (retain_graph) has nothing kept and recomputes them: its gradients
    agree with the first's to bf16's grain (the recomputing backward's own rounding, 2e-3 against float64 here)."""
    import weakref

    from test_autograd import leaves

    from kda_trace.kernels import backward_chunked, chunk
    from kda_trace.kernels.autograd import kda_autograd

    refs, alive = {}, []
    real_chunk, real_k = chunk.kda_chunk, backward_chunked._local_k_kernel

    def keeping(*args, saved=None, **kwargs):
        out = real_chunk(*args, saved=saved, **kwargs)
        refs.update({n: weakref.ref(t) for n, t in (saved or {}).items()})
        return out

    class LastKernel:
        def __getitem__(self, grid):
            alive.append(sorted(n for n, r in refs.items() if r() is not None))
            return real_k[grid]

    monkeypatch.setattr(chunk, "kda_chunk", keeping)
    monkeypatch.setattr(backward_chunked, "_local_k_kernel", LastKernel())
    x = leaves(1, 70, 1, 2, 16, 12, 1, seed=3, dtype=torch.bfloat16, raw=True)
    o, ht = kda_autograd(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"].float(), use_qk_l2norm=True,
                         gate="unbounded", A_log=x["A_log"], dt_bias=x["dt_bias"], beta_kind="logits")
    gen = torch.Generator().manual_seed(4)
    loss = (o.float() * torch.randn(o.shape, generator=gen)).sum() + (ht * torch.randn(ht.shape, generator=gen)).sum()
    loss.backward(retain_graph=True)
    assert set(refs) == {"P", "Aqk", "X", "states", "Vn", "W", "KG", "rq", "rk"}
    assert alive == [["rk", "rq"]]
    first = {n: t.grad.clone() for n, t in x.items() if n != "h0"}
    for t in x.values():
        t.grad = None
    loss.backward()
    assert len(alive) == 2
    for n, g in first.items():
        assert rms_rel(x[n].grad, g) < 1e-2, (n, rms_rel(x[n].grad, g))


def _peak_kernel_buffers(fn):
    """fn() with every torch.empty / torch.zeros that kernels/ makes counted while alive: (result, peak bytes)."""
    import sys
    import weakref

    live, peak = [0], [0]
    originals = {name: getattr(torch, name) for name in ("empty", "zeros")}

    def counting(original):
        def make(*args, **kwargs):
            t = original(*args, **kwargs)
            if "kda_trace/kernels/" in sys._getframe(1).f_code.co_filename.replace("\\", "/"):
                n = t.numel() * t.element_size()
                live[0] += n
                peak[0] = max(peak[0], live[0])
                weakref.finalize(t, lambda: live.__setitem__(0, live[0] - n))
            return t
        return make

    try:
        for name, original in originals.items():
            setattr(torch, name, counting(original))
        result = fn()
    finally:
        for name, original in originals.items():
            setattr(torch, name, original)
    return result, peak[0]


@pytest.mark.slow
def test_workspace_estimate_bounds_the_buffers(monkeypatch):
    """backward.workspace_bytes, which chooses the head groups, is an upper bound of the buffers the chunked
    mode really holds at once (counted as they are made and freed), and not far above it: packed [70, 60, 30]
    tokens, 4 value heads, K = 32, V = 48 (one V-tile, as on a GPU at V <= 64). Two persistent programs: their
    scratch, left out of the estimate, is a few MB on a GPU (8 programs per SM) but here, with a program per
    work item, would be a quarter of the total."""
    monkeypatch.setitem(backward.LAUNCH, "programs", 2)
    x = make(1, 160, 2, 4, 32, 48, seed=23, n_seqs=3)
    cu = torch.tensor([0, 70, 130, 160])
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"])
    _, peak = _peak_kernel_buffers(lambda: backward.kda_backward(
        *args, initial_state=x["h0"], dht=x["dht"], cu_seqlens=cu))
    estimate = backward.workspace_bytes((1, 160, 2, 4, 32, 48, 3), 4, torch.float32)
    assert peak <= estimate + 64, (peak, estimate)  # + the one-element placeholders for absent tensors
    assert peak >= 0.9 * estimate, (peak, estimate)


def test_head_groups_are_as_few_as_fit():
    """Groups follow the budget: the whole backward when it fits, else the fewest groups of whole GVA groups
    under it; the estimate grows with tokens, heads and the dtype."""
    one = backward.workspace_bytes((1, 65536, 1, 1, 128, 128, 12), 1036, torch.float32)
    sizes = (1, 65536, 48, 96, 128, 128, 12)
    assert backward.workspace_bytes(sizes, 1036, torch.float32) == 96 * one
    assert backward.workspace_bytes(sizes, 1036, torch.float64) == 2 * 96 * one
    assert 0.3 * 2**30 < one < 0.5 * 2**30  # about 400 MB per value head here (38 GiB at 96 heads)
    cpu = torch.device("cpu")
    try:
        backward.LAUNCH["workspace_bytes"] = 96 * one
        assert backward.head_groups(sizes, 1036, torch.float32, cpu) == [(slice(0, 48), slice(0, 96))]
        backward.LAUNCH["workspace_bytes"] = 40 * one  # 3 groups of 16 q/k heads, 32 value heads each
        groups = backward.head_groups(sizes, 1036, torch.float32, cpu)
        assert groups == [(slice(h, h + 16), slice(2 * h, 2 * h + 32)) for h in (0, 16, 32)]
    finally:
        backward.LAUNCH["workspace_bytes"] = None
    assert backward.head_groups(sizes, 1036, torch.float32, cpu) == [(slice(0, 48), slice(0, 96))]  # no limit


def test_training_through_in_kernel_options():
    """kernels/autograd.py's training path (L2 norm, unbounded gate from g_raw / A_log / dt_bias, beta
    logits) in the chunked mode: test_autograd.py's fp32-against-float64 check."""
    from test_autograd import test_training_gradients_fp32_against_float64

    test_training_gradients_fp32_against_float64("unbounded")


# ----------------------------------------------------------------------------------------------------------
# GPU: the compiled kernels at real head dims, tf32 products (the interpreter multiplies in fp32)
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("K,V,launch", [(128, 128, {}), (100, 60, {}), (256, 64, {}),
                                        (128, 128, {"chunked_pass_precision": "tf32x3", "split_precision": "tf32x3",
                                                    "split_bv": 32, "programs": 7})])
def test_chunked_mode_on_gpu(K, V, launch, monkeypatch):
    """K, V at real sizes (and odd, and K = 256), packed [700, 1, 333] tokens, GVA 1 -> 2, strong gates in the
    last sequence, fp32 inputs: every gradient against float64 autograd within 5e-3 RMS-relative. tf32
    products cost about 4e-4 (benchmarks/chunked_tf32_estimate.py; fla: 3e-3 from bf16 inputs); the bar leaves
    room for that with strong gates, and catches a wrong term (1e-2 and more)."""
    for key, val in launch.items():
        monkeypatch.setitem(backward.LAUNCH, key, val)
    x = make(1, 1034, 1, 2, K, V, seed=9, n_seqs=3)
    x["g"][:, 701:] = torch.rand(1, 333, 2, K) * -8.0
    check(x, cu_seqlens=torch.tensor([0, 700, 701, 1034]), bar=5e-3)  # check moves the inputs to the GPU


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("K", [12, 16, 24, 32])
def test_small_k_on_gpu(K, monkeypatch):
    """Small K on a GPU, fp32, GVA 1 -> 2, 70 tokens, the chunked mode with its default precisions: every gradient
    within 5e-3 of float64 autograd. With 16-wide K-tiles in `_local_da_kernel` (now part of `_local_vk_kernel`)
    dk was 1.6e-2 to 3.9e-2 off at K = 16 and 12 (H100, Triton 3.6, tf32 products); with
    the pass in bf16 and its Vn and dVn used as they are, dbeta 9.2e-3 at K = 32."""
    monkeypatch.setitem(backward.LAUNCH, "mode", "chunked")
    check(make(1, 70, 1, 2, K, 10, seed=40 + K), bar=5e-3)


@pytest.mark.slow
def test_scale_reaches_the_kernels_in_the_buffers_dtype(monkeypatch):
    """Each chunked kernel that takes the attention scale gets it as one element in the buffers' dtype, float64 at
    scale 0.7 here (`assert_scale_passed_as_tensor`: on an H100 a Python float put this case's gradients 1.7e-8
    off float64)."""
    from kda_trace.kernels import backward_chunked

    names = ("_prep_operands_kernel", "_local_vk_kernel", "_local_k_kernel")
    spies = {name: LaunchSpy(getattr(backward_chunked, name)) for name in names}
    for name, spy in spies.items():
        monkeypatch.setattr(backward_chunked, name, spy)
    make_x, kwargs, _ = SPLIT_PREP_CASES["float64_strong_gates"]
    check(make_x(), **kwargs)
    assert_scale_passed_as_tensor(spies, 0.7, f64)
