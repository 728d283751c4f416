"""The backward kernel's exact mode (kda_trace/kernels/backward.py, LAUNCH["mode"] = "exact"; the default chunked
mode: test_backward_chunked.py) against float64 autograd through an independent recurrence
(kernel_ground_truth.ref_kda, written from KDA.md), under the Triton interpreter on tiny shapes: odd K and V,
single-token sequences, packed varlen, GVA, strong gates, with and without initial state / dht.

The kernel computes in fp32 from fp32 inputs, so the bar is fp32 accumulation error (RMS-relative 1e-5);
a wrong term (a missing decay, a wrong row, a sequence leaking into the next) costs O(1e-2) or more.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kda_trace.platform import default_device, ensure_triton_can_run

DEVICE = default_device()
ensure_triton_can_run(DEVICE)

from kda_trace.kernels.backward import kda_backward, kda_forward_exact
from kda_trace.kernels.options import KDAOptions

from kernel_ground_truth import load_reference, ref_kda, rms_rel
from launch_spy import LaunchSpy

f64 = torch.float64
BAR = 1e-5


@pytest.fixture(autouse=True)
def exact_mode(monkeypatch):
    from kda_trace.kernels import backward

    monkeypatch.setitem(backward.LAUNCH, "mode", "exact")


def make(B, T, H, HV, K, V, seed, n_seqs=None, g_low=None, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)
    q, k = F.normalize(r(B, T, H, K), dim=-1), F.normalize(r(B, T, H, K), dim=-1)
    v = r(B, T, HV, V)
    if g_low is None:
        g = F.logsigmoid(r(B, T, HV, K))
    else:  # strong gates: uniform in [g_low, 0]
        g = torch.rand(B, T, HV, K, generator=gen) * g_low
    beta = torch.rand(B, T, HV, generator=gen)
    N = n_seqs or B
    return dict(q=q.to(dtype), k=k.to(dtype), v=v.to(dtype), g=g.to(dtype), beta=beta.to(dtype),
                h0=r(N, HV, K, V) * 0.3, do=r(B, T, HV, V) * 0.1, dht=r(N, HV, K, V) * 0.1)


def truth(x, scale, cu_seqlens=None, use_h0=True, use_dht=True):
    """float64 autograd through the plain recurrence: gradients of sum(o do) + sum(ht dht)."""
    leaves = {n: x[n].to(f64).clone().requires_grad_() for n in ("q", "k", "v", "g", "beta", "h0")}
    o, ht = ref_kda(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"], scale,
                    leaves["h0"] if use_h0 else None, cu_seqlens)
    loss = (o * x["do"].to(f64)).sum()
    if use_dht:
        loss = loss + (ht * x["dht"].to(f64)).sum()
    loss.backward()
    return {n: t.grad for n, t in leaves.items()}


def grad_errors(x, opts=None, cu_seqlens=None, use_h0=True, use_dht=True, gate_bound=None):
    """`kda_backward`'s gradients of x (checked for shape) and each one's RMS-relative error against `truth`, by
    input name ("h0" with an initial state; without one, dh0 must be None)."""
    opts = opts or KDAOptions()
    K = x["q"].shape[-1]
    scale = opts.resolved_scale(K)
    ref = truth(x, scale, cu_seqlens, use_h0, use_dht)
    dv = lambda t: None if t is None else t.to(DEVICE)
    h0, dht = x["h0"] if use_h0 else None, x["dht"] if use_dht else None
    if opts.state_layout == "vk":
        h0 = None if h0 is None else h0.transpose(-1, -2).contiguous()
        dht = None if dht is None else dht.transpose(-1, -2).contiguous()
    gr = kda_backward(dv(x["q"]), dv(x["k"]), dv(x["v"]), dv(x["g"]), dv(x["beta"]), dv(x["do"]), opts,
                      initial_state=dv(h0), dht=dv(dht), cu_seqlens=dv(cu_seqlens), gate_bound=gate_bound)
    got = {"q": gr.dq, "k": gr.dk, "v": gr.dv, "g": gr.dg, "beta": gr.dbeta}
    for name, t in got.items():
        assert t.shape == x[name].shape, (name, t.shape)
    errors = {name: rms_rel(t, ref[name]) for name, t in got.items()}
    if use_h0:
        errors["h0"] = rms_rel(gr.dh0.transpose(-1, -2) if opts.state_layout == "vk" else gr.dh0, ref["h0"])
    else:
        assert gr.dh0 is None
    return gr, errors


def check(x, opts=None, cu_seqlens=None, use_h0=True, use_dht=True, bar=BAR, gate_bound=None):
    """`grad_errors` with every error at most bar; returns the gradients."""
    gr, errors = grad_errors(x, opts, cu_seqlens, use_h0, use_dht, gate_bound)
    for name, err in errors.items():
        assert err <= bar, (name, err)
    return gr


def assert_scale_passed_as_tensor(spies, scale, dtype):
    """Every launch the LaunchSpy objects in `spies` (kernel name -> spy) saw got the attention scale as one
    element of `dtype` (kernels/backward.py `scale_arg`) and no Python float argument: Triton types a float fp32,
    which put float64 gradients 1.7e-8 off float64 at scale 0.7 on an H100. The interpreter
    keeps a Python float in float64, so only the arguments' types can show it on the CPU."""
    for name, spy in spies.items():
        assert spy.calls, name
        for args in spy.calls:
            assert len([a for a in args if isinstance(a, torch.Tensor) and a.numel() == 1 and a.dtype == dtype
                        and a.item() == scale]) == 1, name
            assert not [a for a in args if isinstance(a, float)], name


@pytest.mark.parametrize("seg", [16, pytest.param(64, marks=pytest.mark.slow)])
def test_dense_odd_dims_two_checkpoints(seg, monkeypatch):
    """B = 2 rows of 70 tokens (two checkpoints; with seg 16, four segments re-run from the first checkpoint
    and a partial one; with 64, the whole chunk in scratch), K = 20, V = 36."""
    from kda_trace.kernels import backward

    monkeypatch.setitem(backward.LAUNCH, "seg", seg)
    check(make(2, 70, 1, 1, 20, 36, seed=1))


def test_packed_varlen_gva_single_token_sequences():
    """Packed [1, 17, 1, 30] tokens (a single-token sequence first and in the middle), GVA 2 -> 4 heads,
    K = 12, V = 20; dht absent. (Several checkpoints per sequence: the dense test.)"""
    x = make(1, 49, 2, 4, 12, 20, seed=2, n_seqs=4)
    cu = torch.tensor([0, 1, 18, 19, 49])
    check(x, cu_seqlens=cu, use_dht=False)


def test_strong_gates_no_initial_state_vk_layout():
    """g uniform in [-8, 0] (exp(+8) anywhere would show), no initial state, [V, K] dht."""
    x = make(1, 40, 1, 2, 16, 24, seed=3, g_low=-8.0)
    check(x, KDAOptions(state_layout="vk"), use_h0=False)
    check(x, KDAOptions(state_layout="vk", scale=0.7))


def test_single_token():
    check(make(3, 1, 1, 1, 8, 5, seed=4))


def test_exact_forward_matches_float64():
    """The FORWARD mode (used by the autograd gradcheck) against the float64 recurrence, packed varlen."""
    x = make(1, 30, 1, 2, 10, 6, seed=5, n_seqs=3)
    cu = torch.tensor([0, 4, 5, 30])
    o, ht = kda_forward_exact(*(x[n].to(DEVICE) for n in ("q", "k", "v", "g", "beta")),
                              initial_state=x["h0"].to(DEVICE), cu_seqlens=cu.to(DEVICE))
    o_ref, h_ref = ref_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], 10 ** -0.5, x["h0"], cu)
    assert rms_rel(o, o_ref) <= BAR and rms_rel(ht, h_ref) <= BAR


def test_float64_inputs_compute_in_float64():
    gr = check(make(1, 9, 1, 1, 6, 7, seed=6, dtype=f64), bar=1e-12)
    assert gr.dq.dtype == f64 and gr.dg.dtype == f64


def test_rejects_in_kernel_options():
    x = make(1, 3, 1, 1, 4, 4, seed=7)
    with pytest.raises(ValueError, match="precomputed"):
        kda_backward(x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"], KDAOptions(gate="safe"))


def test_rejects_chunk_matrices_of_another_shape():
    """chunk_matrices must be the forward's P, Aqk and X, fp32 [NT, HV, 64, 64]: a missing one or one of another
    shape is refused with its name, before any launch."""
    x = {n: t.to(DEVICE) for n, t in make(1, 70, 1, 2, 8, 4, seed=7).items()}  # two chunks, two value heads
    good = {n: torch.zeros(2, 2, 64, 64, device=DEVICE) for n in ("P", "Aqk", "X")}
    for bad in ({"P": good["P"], "Aqk": good["Aqk"]}, {**good, "X": torch.zeros(1, 2, 64, 64, device=DEVICE)},
                {**good, "Aqk": good["Aqk"].double()}):
        missing_or_wrong = next(n for n in ("P", "Aqk", "X") if n not in bad or bad[n] is not good[n])
        with pytest.raises(ValueError, match=f"chunk_matrices\\['{missing_or_wrong}'\\] must be \\[2, 2, 64, 64\\]"):
            kda_backward(x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"], chunk_matrices=bad)


def test_qk_norms_without_the_chunk_matrices_are_applied_here():
    """kda_backward(qk_norms=...) where the kernels do not read the factors (the exact mode, the interpreter's
    default; no chunk matrices): q and k normalised here, the gradients those of the normalised inputs given
    directly, bit for bit, and dq, dk in fp32 whatever q's dtype; factors of the wrong shape refused by name."""
    x = {n: t.to(DEVICE) for n, t in make(1, 20, 1, 2, 6, 5, seed=9).items()}
    q, k = x["q"].bfloat16(), x["k"].bfloat16()
    rq, rk = (1.0 / torch.sqrt((t.float() ** 2).sum(-1) + 1e-6) for t in (q, k))
    rest = (x["v"], x["g"], x["beta"], x["do"])
    given = kda_backward(q.float() * rq[..., None], k.float() * rk[..., None], *rest)
    normed = kda_backward(q, k, *rest, qk_norms=(rq, rk))
    for name in ("dq", "dk", "dv", "dg", "dbeta"):
        assert torch.equal(getattr(normed, name), getattr(given, name)), name
    assert normed.dq.dtype == torch.float32 and normed.dk.dtype == torch.float32
    with pytest.raises(ValueError, match=r"qk_norms rk must be \[1, 20, 1\]"):
        kda_backward(q, k, *rest, qk_norms=(rq, rk[:, :10]))


def test_v_tiles_add_up(monkeypatch):
    """Several V-tiles (16 wide, V = 36: two full and a partial one) whose dq, dk, dg, dbeta partial sums meet
    in atomic adds, as on a GPU (the interpreter otherwise runs one tile)."""
    from kda_trace.kernels import backward

    monkeypatch.setitem(backward.LAUNCH, "bv", 16)
    check(make(1, 20, 1, 2, 20, 36, seed=8))


@pytest.mark.parametrize("seg", [16, 64])
@pytest.mark.slow
def test_multi_chunk_packed_gva_one_token_last(seg, monkeypatch):
    """The chunk-level pass over several chunks: packed [130, 64, 1, 110, 1] tokens (three chunks with a
    partial one, exactly one chunk, single tokens, a chunk of 46 tokens: with seg 16, three segments, the
    last partial, a 1-token last sequence), GVA 1 -> 2 heads, K = 12, V = 20, with and without initial state
    / dht; the local kernel with fewer persistent programs than work items (each loops over several chunks,
    reusing its scratch)."""
    from kda_trace.kernels import backward

    x = make(1, 306, 1, 2, 12, 20, seed=12, n_seqs=5)
    cu = torch.tensor([0, 130, 194, 195, 305, 306])
    monkeypatch.setitem(backward.LAUNCH, "programs", 3)
    monkeypatch.setitem(backward.LAUNCH, "seg", seg)
    check(x, cu_seqlens=cu)
    check(x, cu_seqlens=cu, use_h0=False, use_dht=False)


@pytest.mark.slow
def test_multi_chunk_strong_gates_all_tiles(monkeypatch):
    """200 tokens (four chunks, the last partial) with g uniform in [-8, 0], K = 20, V = 36 (neither a power
    of two), [V, K] states, no initial state; every kernel tiled as on a GPU: 16-wide V-tiles of the local
    reverse (atomic partial sums), of the chunk pass and of the chunk maps (two column tiles of A_c), the
    pass's products in 16-row blocks (two per [32, 32] map), segments of 16 tokens."""
    from kda_trace.kernels import backward

    for key, val in (("bv", 16), ("pass_bv", 16), ("map_bx", 16), ("pass_rows", 16), ("seg", 16)):
        monkeypatch.setitem(backward.LAUNCH, key, val)
    x = make(1, 200, 1, 1, 20, 36, seed=13, g_low=-8.0)
    check(x, KDAOptions(state_layout="vk"), use_h0=False)
    check(x, KDAOptions(state_layout="vk", scale=0.7))


@pytest.mark.slow
def test_multi_chunk_float64():
    """Float64 inputs over three chunks (and packed with a 1-token sequence): the chunk pass's products in
    ieee float64, every gradient to float64 accuracy."""
    check(make(1, 140, 1, 2, 6, 7, seed=14, dtype=f64), bar=1e-12)
    check(make(1, 140, 1, 2, 6, 7, seed=14, dtype=f64, n_seqs=2), cu_seqlens=torch.tensor([0, 139, 140]), bar=1e-12)


def test_chunk_map_matches_chunked_form():
    """The derivation the chunk pass rests on, in float64 torch (no kernel): over one chunk, with the chunked
    forward's quantities (kernels/chunk.py: G, A_kk, A_qk, X = (I + A_kk)^-1, W, Qt, Kt, gamma), the
    product of the token maps M_t = (I - beta k k^T) diag(exp g) is diag(gamma) - Kt^T W, and the reverse
    sweep from dS = 0 gives Qt^T dO - W^T A_qk^T dO: dS_start = diag(gamma) dS_end + Qt^T dO - W^T (Kt dS_end
    + A_qk^T dO)."""
    x = make(1, 50, 1, 1, 8, 5, seed=15, dtype=f64)
    q, k, g, beta, do = (x[n][0, :, 0].to(f64) for n in ("q", "k", "g", "beta", "do"))
    n, K, scale = 50, 8, 0.4
    G = g.cumsum(0)
    decay = torch.exp(G[:, None, :] - G[None, :, :])  # [i, j, d]: exp(G_id - G_jd)
    A_kk = torch.tril(beta[:, None] * torch.einsum("id,jd,ijd->ij", k, k, decay), -1)
    A_qk = torch.tril(scale * torch.einsum("id,jd,ijd->ij", q, k, decay))
    X = torch.linalg.inv(torch.eye(n, dtype=f64) + A_kk)
    W = X @ (beta[:, None] * k * torch.exp(G))
    Qt, Kt, gamma = scale * q * torch.exp(G), k * torch.exp(G[-1] - G), torch.exp(G[-1])
    A, b = torch.eye(K, dtype=f64), torch.zeros(K, 5, dtype=f64)
    for t in range(n):
        A = (torch.eye(K, dtype=f64) - beta[t] * torch.outer(k[t], k[t])) @ torch.diag(torch.exp(g[t])) @ A
    for t in reversed(range(n)):
        b = b + scale * torch.outer(q[t], do[t])
        b = torch.exp(g[t])[:, None] * (b - beta[t] * torch.outer(k[t], k[t] @ b))
    assert torch.allclose(A, torch.diag(gamma) - Kt.T @ W, atol=1e-12)
    assert torch.allclose(b, Qt.T @ do - W.T @ (A_qk.T @ do), atol=1e-12)


class Defn:
    """The few Definition attributes the backward adapter reads: name, tags, input names in order."""

    def __init__(self, name, tags, inputs):
        self.name, self.tags, self.const_axes = name, tags, {}
        self.inputs = dict.fromkeys(inputs)

    def tag(self, key, default=None):
        vals = [t.partition(":")[2] for t in self.tags if t.partition(":")[0] == key]
        return vals[0] if vals else default


@pytest.mark.parametrize("family,gate", [("backward_varlen", None), ("backward_fused", "unbounded"),
                                         ("backward_fused", "safe")])
def test_packed_adapters_vs_family_references(family, gate):
    """ours_train's packed backward adapters (the fused one: norm, gate and sigmoid differentiated by torch
    around the kernel) against the families' own references (tools/kda_references/backward_*.py, themselves
    tested against float64 autograd in tests/references), fp32 inputs, packed [1, 5, 3] tokens, GVA 1 -> 2."""
    from kda_trace.solutions import ours_train

    H, HV, K, V = 1, 2, 12, 10
    consts = dict(NUM_HEADS=H, NUM_V_HEADS=HV, HEAD_DIM_K=K, HEAD_DIM_V=V)
    if family == "backward_fused":
        consts["LOWER_BOUND"] = -5.0 if gate == "safe" else None
    ref = load_reference(family, **consts)
    fused = family == "backward_fused"
    tags = ["stage:backward", "state_layout:kv", "batch:varlen"]
    tags += ([f"gate:{gate}", "beta:logits", "qk_norm:l2"] + (["lower_bound:-5"] if gate == "safe" else [])
             if fused else ["gate:precomputed", "beta:prob", "qk_norm:none"])
    names = (["q", "k", "v", "g_raw", "A_log", "dt_bias", "b"] if fused else ["q", "k", "v", "g", "beta"]) + \
        ["initial_state", "cu_seqlens", "scale", "do", "dht"]
    defn = Defn(f"kda_{family}_test", tags, names)
    assert ours_train.supports(defn) is None, ours_train.supports(defn)
    run = ours_train.build(defn)
    gen = torch.Generator().manual_seed(11)
    r = lambda *s: torch.randn(*s, generator=gen)
    T = 9
    x = {"q": r(T, H, K), "k": r(T, H, K), "v": r(T, HV, V)}
    if fused:
        x.update(g_raw=r(T, HV, K), A_log=r(HV) * 0.5, dt_bias=r(HV, K), b=r(T, HV))
    else:
        x["q"], x["k"] = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
        x.update(g=F.logsigmoid(r(T, HV, K)), beta=torch.rand(T, HV, generator=gen))
    x.update(initial_state=r(3, HV, K, V) * 0.3, cu_seqlens=torch.tensor([0, 1, 6, 9]), scale=K ** -0.5,
             do=r(T, HV, V) * 0.1, dht=r(3, HV, K, V) * 0.1)
    want = ref.run(**x)
    got = run(**{n: t.to(DEVICE) if torch.is_tensor(t) else t for n, t in x.items()})
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert rms_rel(a, b) < 1e-5, rms_rel(a, b)


# ----------------------------------------------------------------------------------------------------------
# GPU: real head dims, several V-tiles, int64 addressing
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@needs_gpu
def test_real_head_dims_packed_gva_on_gpu():
    """K = V = 128, GVA 4 -> 8 heads, packed [700, 1, 333] tokens, fp32 inputs, strong gates in one
    sequence: every gradient at fp32 accuracy against float64 autograd (on the CPU)."""
    x = make(1, 1034, 4, 8, 128, 128, seed=9, n_seqs=3)
    x["g"][:, 701:] = torch.rand(1, 333, 8, 128) * -8.0
    x = {n: t.cuda() for n, t in x.items()}
    cu = torch.tensor([0, 700, 701, 1034])
    ref = truth({n: t.cpu() for n, t in x.items()}, 128 ** -0.5, cu)
    gr = kda_backward(x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"], initial_state=x["h0"], dht=x["dht"],
                      cu_seqlens=cu.cuda())
    for name, t in (("q", gr.dq), ("k", gr.dk), ("v", gr.dv), ("g", gr.dg), ("beta", gr.dbeta), ("h0", gr.dh0)):
        assert rms_rel(t, ref[name]) <= BAR, (name, rms_rel(t, ref[name]))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("K,V,launch", [(128, 128, {"programs": 7, "seg": 64}),
                                        (128, 128, {"bv": 32, "map_bx": 32, "pass_bv": 32, "pass_rows": 32}),
                                        (256, 64, {}), (100, 60, {})])
def test_launch_settings_and_head_dims_on_gpu(K, V, launch, monkeypatch):
    """The compiled kernels under other launch settings (few persistent programs looping over many chunks,
    64-token segments, 32-wide tiles) and head dims
    (K = 256 with V = 64; K, V not powers of two): packed
    [300, 1, 129] tokens, GVA 1 -> 2, fp32 gradients against float64 autograd."""
    from kda_trace.kernels import backward

    for key, val in launch.items():
        monkeypatch.setitem(backward.LAUNCH, key, val)
    x = make(1, 430, 1, 2, K, V, seed=16, n_seqs=3)
    cu = torch.tensor([0, 300, 301, 430])
    ref = truth(x, K ** -0.5, cu)
    x = {n: t.cuda() for n, t in x.items()}
    gr = kda_backward(x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"], initial_state=x["h0"], dht=x["dht"],
                      cu_seqlens=cu.cuda())
    for name, t in (("q", gr.dq), ("k", gr.dk), ("v", gr.dv), ("g", gr.dg), ("beta", gr.dbeta), ("h0", gr.dh0)):
        assert rms_rel(t, ref[name]) <= BAR, (name, rms_rel(t, ref[name]))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("mode", ["chunked", "exact"])
def test_bf16_training_step_matches_fla_on_gpu(mode, monkeypatch):
    """bf16 inputs through kda_autograd (safe gate, L2 norm, beta logits in our kernels; the backward in both
    modes, the chunked one the default outside this file) and through fla's chunk_kda with the same options:
    every gradient agrees to bf16 accuracy."""
    fla = pytest.importorskip("fla.ops.kda")
    from kda_trace.kernels import backward
    from kda_trace.kernels.autograd import kda_autograd

    monkeypatch.setitem(backward.LAUNCH, "mode", mode)

    gen = torch.Generator(device="cuda").manual_seed(10)
    r = lambda *s: torch.randn(*s, device="cuda", generator=gen)
    T, H, K, bf = 1000, 4, 128, torch.bfloat16
    cu = torch.tensor([0, 100, 613, 1000], device="cuda")
    leaves = {"q": r(1, T, H, K).to(bf), "k": r(1, T, H, K).to(bf), "v": r(1, T, H, K).to(bf),
              "g": r(1, T, H, K).to(bf), "b": r(1, T, H).to(bf), "A_log": r(H) * 0.5, "dt_bias": r(H, K),
              "h0": r(3, H, K, K) * 0.2}
    do, dht = r(1, T, H, K).to(bf) * 0.1, r(3, H, K, K) * 0.1
    grads = []
    for who in ("ours", "fla"):
        x = {n: t.clone().requires_grad_() for n, t in leaves.items()}
        if who == "ours":
            o, ht = kda_autograd(x["q"], x["k"], x["v"], x["g"], x["b"], initial_state=x["h0"], cu_seqlens=cu,
                                 use_qk_l2norm=True, gate="safe", A_log=x["A_log"], dt_bias=x["dt_bias"],
                                 beta_kind="logits")
        else:
            o, ht = fla.chunk_kda(x["q"], x["k"], x["v"], x["g"], x["b"], initial_state=x["h0"],
                                  output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                  use_beta_sigmoid_in_kernel=True, safe_gate=True, lower_bound=-5.0,
                                  A_log=x["A_log"], dt_bias=x["dt_bias"].view(-1), cu_seqlens=cu)
        torch.autograd.backward((o, ht), (do, dht))
        grads.append({n: t.grad for n, t in x.items()})
    for n in leaves:
        assert rms_rel(grads[0][n], grads[1][n]) < 2e-2, (n, rms_rel(grads[0][n], grads[1][n]))


@pytest.mark.stress
@needs_gpu
@pytest.mark.parametrize("mode", ["chunked", "exact"])
def test_int64_addressing_past_2_31_elements_backward(mode, monkeypatch):
    """q with more than 2^31 elements (H = 1, K = 256, 8.4M tokens in 1025 sequences; V = 16), in both modes
    (this file pins the exact one; the chunked mode is the default): the last sequence's gradients must equal
    those of a run on that sequence alone (bit for bit: one V-tile per program, so no atomic-add reordering in
    the exact mode; the chunked mode has no atomics). GPU memory at the peak: about 60 GB in the exact mode
    (the chunk maps A_c, K x K per chunk: 34 GB here); in the chunked mode about 75 GB by its buffer sizes (fp32
    W, Qt, Kt and 3a's partial sums: about 7 KB per token at K = 256, and the inputs; not measured): the H200."""
    from kda_trace.kernels import backward

    monkeypatch.setitem(backward.LAUNCH, "mode", mode)
    H, K, V = 1, 256, 16
    T = (2**31) // (H * K) + 1000
    last = 300
    bounds = list(range(0, T - last, 8192)) + [T - last, T]
    cu = torch.tensor(bounds, device="cuda")
    bf = torch.bfloat16
    q = torch.nn.functional.normalize(torch.randn(1, T, H, K, device="cuda"), dim=-1).to(bf)
    k = torch.nn.functional.normalize(torch.randn(1, T, H, K, device="cuda"), dim=-1).to(bf)
    v = torch.randn(1, T, H, V, device="cuda", dtype=bf)
    g = torch.nn.functional.logsigmoid(torch.randn(1, T, H, K, device="cuda"))
    beta = torch.rand(1, T, H, device="cuda").to(bf)
    do = torch.randn(1, T, H, V, device="cuda", dtype=bf)
    assert q.numel() > 2**31
    gr = kda_backward(q, k, v, g, beta, do, cu_seqlens=cu)
    s = slice(T - last, T)
    one = kda_backward(q[:, s], k[:, s], v[:, s], g[:, s], beta[:, s], do[:, s])
    for a, b in ((gr.dq, one.dq), (gr.dk, one.dk), (gr.dv, one.dv), (gr.dg, one.dg), (gr.dbeta, one.dbeta)):
        assert torch.equal(a[:, s], b)
    assert torch.isfinite(gr.dq[:, :1000].float()).all()



@pytest.mark.large  # on 2 busy CPU cores it ran past its 600 s limit: too long for the CPU tiers
def test_kernels_compile_for_sm90():
    """The backward and gate kernels compile for sm_90 (Triton's NVIDIA passes and ptxas, no GPU needed):
    the interpreter runs code the compiler may refuse."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "compile_sm90.py")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]


def test_scale_reaches_the_kernels_in_the_buffers_dtype(monkeypatch):
    """The exact mode's kernels and the exact forward get the attention scale as one float64 element
    (`assert_scale_passed_as_tensor`; test_backward_chunked.py has the chunked mode's twin)."""
    from kda_trace.kernels import backward

    names = ("_chunk_maps_kernel", "_local_kernel", "_forward_exact_kernel")
    spies = {name: LaunchSpy(getattr(backward, name)) for name in names}
    for name, spy in spies.items():
        monkeypatch.setattr(backward, name, spy)
    x = make(1, 20, 1, 1, 8, 8, seed=21, dtype=f64)
    opts = KDAOptions(scale=0.7)
    check(x, opts=opts, bar=1e-12)
    kda_forward_exact(x["q"].to(DEVICE), x["k"].to(DEVICE), x["v"].to(DEVICE), x["g"].to(DEVICE),
                      x["beta"].to(DEVICE), opts, initial_state=x["h0"].to(DEVICE))
    assert_scale_passed_as_tensor(spies, 0.7, f64)
