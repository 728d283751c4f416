"""The chunked references (forward, prefill, prefill_chunk_states and the three backward families) against the
recurrence computed token by token in float64 (token_loop_truth.py), on small shapes of our choosing: sequence
lengths 1, shorter than a chunk, not multiples of it and across several chunks; packed batches of uneven
lengths; GVA (4 value heads on 2 q/k heads) and K != V (8 and 12); both gates, ordinary and strong (per-token
decays of -50 to -250, so a chunk's cumulative gate reaches the thousands); with and without initial states.

The references compute in float64 and return float32 (or the input dtype, through float32), so the check is
that every output is the float64 truth rounded to float32: |got - truth| <= 2^-24 |truth| + 1e-10 RMS(truth)
element by element (half a float32 ulp plus a float64-level slack), and finite. With bf16 inputs the bf16
outputs are the float32-input run's outputs cast to bf16, bit for bit (same values in, float32 rounding
first). The references are built from tools/kda_references with the dataset builder's constant rewriting and
compiled by the runner's compile_reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import token_loop_truth as tl

from kda_trace.reference import compile_reference

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
from build_kda_dataset import reference_source  # noqa: E402

f64 = torch.float64
H, HV, K, V = 2, 4, 8, 12  # GVA and K != V at once
SCALE = K ** -0.5
LOWER_BOUND = -5.0
CHUNK_SIZE = 64  # prefill_chunk_states' chunk of the contract

PACKINGS = {"one_token": [1], "short_mixed": [5, 1, 17], "ragged": [40, 3, 16, 33], "across_64": [70, 1, 129, 64]}
DENSE = {"b1_t1": (1, 1), "b2_t5": (2, 5), "b3_t17": (3, 17), "b2_t40": (2, 40)}


def cases(values: dict, fast: set):
    """pytest params of `values`, those not named in `fast` in the slow tier (the fast tier keeps the cases that
    cross chunk boundaries and hold a one-token sequence)."""
    return [pytest.param(v, id=k, marks=() if k in fast else pytest.mark.slow) for k, v in values.items()]


FAST_DENSE, FAST_PACKING = {"b3_t17"}, {"across_64"}


SMALLEST = {"cpu": 1, "cuda": 1}  # memory budgets of one step (forward) or one chunk (backward) at a time
MEMORY = {"forward": ["GROUP_BYTES"], "prefill": ["GROUP_BYTES"], "prefill_chunk_states": ["GROUP_BYTES"],
          "backward_varlen": ["STATE_BYTES", "INTRA_BYTES"], "backward_fused": ["STATE_BYTES", "INTRA_BYTES"]}


def build(family: str, smallest_memory: bool = False, **constants):
    """The family's reference with our head counts, compiled the runner's way; smallest_memory: its memory
    budgets set to the least (one step of chunks at a time, one sequence and one chunk under autograd)."""
    consts = {"NUM_HEADS": H, "NUM_V_HEADS": HV, "HEAD_DIM_K": K, "HEAD_DIM_V": V, **constants}
    run = compile_reference(reference_source(family, **consts), f"{family}-test")
    if smallest_memory:
        for name in MEMORY[family]:
            assert name in run.__globals__, (family, name)
            run.__globals__[name] = SMALLEST
    return run


def assert_rounded(got: torch.Tensor, truth: torch.Tensor, what: str) -> None:
    """got (float32) is the float64 truth rounded once: within half an ulp, plus 1e-10 of the truth's RMS."""
    assert got.shape == truth.shape, (what, got.shape, truth.shape)
    assert bool(torch.isfinite(got).all()), f"{what}: not finite"
    assert bool(torch.isfinite(truth).all()), f"{what}: the truth is not finite"
    err = (got.double() - truth).abs()
    bound = truth.abs() * 2.0 ** -24 + 1e-10 * truth.pow(2).mean().sqrt()
    bad = err > bound
    assert not bool(bad.any()), (f"{what}: {int(bad.sum())} elements past the rounding bound (worst "
                                 f"{(err[bad] / bound[bad]).max().item():.3g}x)")


def gen(seed: int):
    return torch.Generator().manual_seed(seed)


def unit(shape, rng):
    x = torch.randn(shape, generator=rng)
    return x / x.norm(dim=-1, keepdim=True)


def precomputed_g(shape, strength: str, rng):
    """Log decays <= 0: ordinary (logsigmoid of a normal) or strong (-50 to -250 per token)."""
    if strength == "strong":
        return -50.0 - 200.0 * torch.rand(shape, generator=rng)
    return torch.nn.functional.logsigmoid(torch.randn(shape, generator=rng))


def raw_gate_inputs(T, strength: str, rng):
    """g_raw, A_log, dt_bias: ordinary, or strong (g_raw ~ N(30, 10): the unbounded gate gives g of about -30 to
    -700 per token, the safe gate sits at its bound)."""
    mean = 30.0 if strength == "strong" else 0.0
    std = 10.0 if strength == "strong" else 1.0
    g_raw = mean + std * torch.randn(T, HV, K, generator=rng)
    return g_raw, torch.rand(HV, generator=rng) * 3.0, -5.0 + 4.0 * torch.rand(HV, K, generator=rng)


def bf16_inputs(x: dict) -> dict:
    """The same call with its token tensors rounded to bf16 (states and gate parameters stay float32)."""
    keep = {"A_log", "dt_bias", "initial_state", "dht", "g"}
    return {n: (t.to(torch.bfloat16) if torch.is_tensor(t) and t.is_floating_point() and n not in keep else t)
            for n, t in x.items()}


def check_bf16_run(run, x: dict, names: list[str]) -> None:
    """bf16 inputs: bf16 outputs equal the float32-input run's outputs (same values) cast to bf16, bit for bit."""
    xb = bf16_inputs(x)
    got = run(**xb)
    x32 = {n: (t.float() if torch.is_tensor(t) and t.dtype == torch.bfloat16 else t) for n, t in xb.items()}
    want = run(**x32)
    for name, a, b in zip(names, got, want, strict=True):
        assert torch.equal(a, b.to(a.dtype)), f"{name}: bf16 run differs from the float32 run cast"


# ------------------------------------------------------------------------------------------- forward
def forward_inputs(B, T, strength, with_state, seed=0):
    rng = gen(seed)
    return {"q": unit((B, T, H, K), rng), "k": unit((B, T, H, K), rng), "v": torch.randn(B, T, HV, V, generator=rng),
            "g": precomputed_g((B, T, HV, K), strength, rng), "beta": torch.rand(B, T, HV, generator=rng),
            "initial_state": 0.5 * torch.randn(B, HV, K, V, generator=rng) if with_state else None, "scale": SCALE}


@pytest.mark.parametrize("with_state", [True, False], ids=["h0", "zeros"])
@pytest.mark.parametrize("strength", ["ordinary", "strong"])
@pytest.mark.parametrize("shape", cases(DENSE, FAST_DENSE))
def test_forward(shape, strength, with_state):
    x = forward_inputs(*shape, strength, with_state)
    o, ht = build("forward")(**x)
    B, T = shape
    cu = torch.arange(B + 1) * T
    flat = [x[n].reshape(B * T, *x[n].shape[2:]) for n in ("q", "k", "v", "g", "beta")]
    o_t, ht_t = tl.packed(*flat, x["initial_state"], cu, SCALE)
    assert o.dtype == torch.float32 and ht.dtype == torch.float32
    assert_rounded(o, o_t.reshape(B, T, HV, V), "o")
    assert_rounded(ht, ht_t, "final_state")


def test_forward_bf16_and_groups():
    """bf16 inputs round once more than the float32 run, bit for bit; one step of chunks at a time (the smallest
    memory) gives the same bits as the default groups."""
    x = forward_inputs(2, 40, "ordinary", True)
    check_bf16_run(build("forward"), x, ["o", "final_state"])
    small = build("forward", smallest_memory=True)(**x)
    for a, b in zip(build("forward")(**x), small):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------------------------- prefill
def prefill_inputs(lens, strength, with_state, seed=0):
    rng = gen(seed)
    T, N = sum(lens), len(lens)
    g_raw, A_log, dt_bias = raw_gate_inputs(T, strength, rng)
    return {"q": torch.randn(T, H, K, generator=rng), "k": torch.randn(T, H, K, generator=rng),
            "v": torch.randn(T, HV, V, generator=rng), "g_raw": g_raw, "A_log": A_log, "dt_bias": dt_bias,
            "b": torch.randn(T, HV, generator=rng),
            "initial_state": 0.5 * torch.randn(N, HV, V, K, generator=rng) if with_state else None,
            "cu_seqlens": torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32), "scale": SCALE}


def prefill_truth(x, lower_bound, states_every=None):
    """Token-loop truth of a prefill call: o, final states and (states_every) chunk states, K-last."""
    h0 = None if x["initial_state"] is None else x["initial_state"].to(f64).transpose(-1, -2)
    g = tl.gate(x["g_raw"], x["A_log"], x["dt_bias"], lower_bound)
    out = tl.packed(tl.l2_normalize(x["q"]), tl.l2_normalize(x["k"]), x["v"], g, torch.sigmoid(x["b"].to(f64)), h0,
                    x["cu_seqlens"], SCALE, states_every)
    return (out[0],) + tuple(s.transpose(-1, -2) for s in out[1:])


GATES = {"unbounded": None, "safe": LOWER_BOUND}


@pytest.mark.parametrize("with_state", [True, False], ids=["h0", "zeros"])
@pytest.mark.parametrize("strength", ["ordinary", "strong"])
@pytest.mark.parametrize("gate", list(GATES))
@pytest.mark.parametrize("lens", cases(PACKINGS, FAST_PACKING))
def test_prefill_and_chunk_states(lens, gate, strength, with_state):
    """prefill and prefill_chunk_states against the token loop; their o and final states are the same bits."""
    lb = GATES[gate]
    x = prefill_inputs(lens, strength, with_state)
    o, ht = build("prefill", LOWER_BOUND=lb)(**x)
    o_t, ht_t, states_t = prefill_truth(x, lb, CHUNK_SIZE)
    assert_rounded(o, o_t, "o")
    assert_rounded(ht, ht_t, "final_state")
    o2, ht2, states = build("prefill_chunk_states", LOWER_BOUND=lb)(**x)
    assert torch.equal(o, o2) and torch.equal(ht, ht2), "prefill_chunk_states' o / final_state differ from prefill's"
    assert states.shape == (sum(-(-n // CHUNK_SIZE) for n in lens), HV, V, K)
    assert_rounded(states, states_t, "chunk_states")


def test_prefill_bf16_and_groups():
    x = prefill_inputs([40, 3, 70], "ordinary", True)
    for family, names in [("prefill", ["o", "final_state"]), ("prefill_chunk_states", ["o", "final_state", "chunk_states"])]:
        check_bf16_run(build(family, LOWER_BOUND=LOWER_BOUND), x, names)
        small = build(family, smallest_memory=True, LOWER_BOUND=LOWER_BOUND)(**x)
        for a, b in zip(build(family, LOWER_BOUND=LOWER_BOUND)(**x), small):
            assert torch.equal(a, b)


# ------------------------------------------------------------------------------------------ backward
def grad_truth(forward, leaves: dict, do, dht):
    """Gradients of sum(o * do) + sum(final_state * dht) by autograd through `forward(**leaves)` in float64."""
    leaves = {n: t.detach().to(f64).requires_grad_() for n, t in leaves.items()}
    o, ht = forward(**leaves)
    loss = (o * do.to(f64)).sum() + (ht * dht.to(f64)).sum()
    return torch.autograd.grad(loss, list(leaves.values()))


@pytest.mark.parametrize("strength", ["ordinary", "strong"])
@pytest.mark.parametrize("shape", cases(DENSE, FAST_DENSE))
def test_backward_dense(shape, strength):
    B, T = shape
    x = forward_inputs(B, T, strength, True, seed=1)
    rng = gen(2)
    do, dht = torch.randn(B, T, HV, V, generator=rng), torch.randn(B, HV, K, V, generator=rng)
    got = build("backward")(**x, do=do, dht=dht)
    cu = torch.arange(B + 1) * T

    def forward(q, k, v, g, beta, initial_state):
        o, ht = tl.packed(*(t.reshape(B * T, *t.shape[2:]) for t in (q, k, v, g, beta)), initial_state, cu, SCALE)
        return o.reshape(B, T, HV, V), ht

    want = grad_truth(forward, {n: x[n] for n in ("q", "k", "v", "g", "beta", "initial_state")}, do, dht)
    for name, a, b in zip(["dq", "dk", "dv", "dg", "dbeta", "dh0"], got, want):
        assert_rounded(a, b, name)


def varlen_backward_inputs(lens, strength, seed=1):
    rng = gen(seed)
    T, N = sum(lens), len(lens)
    x = {"q": unit((T, H, K), rng), "k": unit((T, H, K), rng), "v": torch.randn(T, HV, V, generator=rng),
         "g": precomputed_g((T, HV, K), strength, rng), "beta": torch.rand(T, HV, generator=rng),
         "initial_state": 0.5 * torch.randn(N, HV, K, V, generator=rng),
         "cu_seqlens": torch.tensor([0] + lens).cumsum(0).to(torch.int32), "scale": SCALE}
    return x, torch.randn(T, HV, V, generator=rng), torch.randn(N, HV, K, V, generator=rng)


@pytest.mark.parametrize("strength", ["strong", pytest.param("ordinary", marks=pytest.mark.slow)])
@pytest.mark.parametrize("lens", cases(PACKINGS, FAST_PACKING))
def test_backward_varlen(lens, strength):
    x, do, dht = varlen_backward_inputs(lens, strength)
    got = build("backward_varlen")(**x, do=do, dht=dht)

    def forward(q, k, v, g, beta, initial_state):
        return tl.packed(q, k, v, g, beta, initial_state, x["cu_seqlens"], SCALE)

    want = grad_truth(forward, {n: x[n] for n in ("q", "k", "v", "g", "beta", "initial_state")}, do, dht)
    for name, a, b in zip(["dq", "dk", "dv", "dg", "dbeta", "dh0"], got, want):
        assert_rounded(a, b, name)


@pytest.mark.parametrize("strength", ["strong", pytest.param("ordinary", marks=pytest.mark.slow)])
@pytest.mark.parametrize("gate", list(GATES))
@pytest.mark.parametrize("lens", cases(PACKINGS, FAST_PACKING))
def test_backward_fused(lens, gate, strength):
    lb = GATES[gate]
    x = prefill_inputs(lens, strength, True, seed=3)
    x["initial_state"] = x["initial_state"].transpose(-1, -2).contiguous()   # [K, V] states here
    rng = gen(4)
    do, dht = torch.randn(sum(lens), HV, V, generator=rng), torch.randn(len(lens), HV, K, V, generator=rng)
    got = build("backward_fused", LOWER_BOUND=lb)(**x, do=do, dht=dht)

    def forward(q, k, v, g_raw, A_log, dt_bias, b, initial_state):
        return tl.packed(tl.l2_normalize(q), tl.l2_normalize(k), v, tl.gate(g_raw, A_log, dt_bias, lb),
                         torch.sigmoid(b), initial_state, x["cu_seqlens"], SCALE)

    names = ["q", "k", "v", "g_raw", "A_log", "dt_bias", "b", "initial_state"]
    want = grad_truth(forward, {n: x[n] for n in names}, do, dht)
    for name, a, b in zip(["dq", "dk", "dv", "dg_raw", "dA_log", "ddt_bias", "db", "dh0"], got, want):
        assert_rounded(a, b, name)


@pytest.mark.slow
def test_backward_bf16_and_groups():
    """bf16 inputs: the bf16 gradients are the float32 run's cast, bit for bit; the smallest memory budgets (one
    sequence, one chunk step per group, one chunk under autograd at a time) give the same bits as the defaults."""
    x, do, dht = varlen_backward_inputs([40, 3, 70], "ordinary")
    names = ["dq", "dk", "dv", "dg", "dbeta", "dh0"]
    run = build("backward_varlen")
    check_bf16_run(run, {**x, "do": do, "dht": dht}, names)
    small = build("backward_varlen", smallest_memory=True)(**x, do=do, dht=dht)
    for a, b in zip(run(**x, do=do, dht=dht), small):
        assert torch.equal(a, b)
    f = prefill_inputs([40, 3, 70], "ordinary", True, seed=3)
    f["initial_state"] = f["initial_state"].transpose(-1, -2).contiguous()
    run = build("backward_fused", LOWER_BOUND=LOWER_BOUND)
    check_bf16_run(run, {**f, "do": do, "dht": dht}, ["dq", "dk", "dv", "dg_raw", "dA_log", "ddt_bias", "db", "dh0"])
    small = build("backward_fused", smallest_memory=True, LOWER_BOUND=LOWER_BOUND)(**f, do=do, dht=dht)
    for a, b in zip(run(**f, do=do, dht=dht), small):
        assert torch.equal(a, b)
