"""The KDA dataset: every reference against independent ground truth, plus dataset and coverage checks.

Ground truth is fla-core's pure-PyTorch code: naive_recurrent_kda (the recurrence), naive_kda_gate and
naive_kda_lowerbound_gate (the gates). Layouts are converted here (K-last states are transposed, packed
sequences are split and run one by one), q/k L2 norm is applied here with KDA.md's formula.
fla's naive functions compute in float32 whatever the input dtype (they call `.to(torch.float)`), so the
agreement is checked at float32 level (RMS-relative error < 2e-6), on float32 copies of the smoke
workloads' inputs; the references are also run on the real (bf16) inputs to check output dtypes.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from kda_trace.coverage import coverage_matrix, render_coverage
from kda_trace.dataset import load_dataset
from kda_trace.inputs import make_inputs, torch_dtype
from kda_trace.reference import compile_reference

fla_naive = pytest.importorskip("fla.ops.kda.naive")
fla_gate = pytest.importorskip("fla.ops.kda.gate")

REPO = Path(__file__).resolve().parent.parent
DATASET = load_dataset(REPO)
KDA = sorted((d for d in DATASET.definitions.values() if d.op_type == "kda"), key=lambda d: d.name)
SMOKE = [(d, w) for d in KDA for w in DATASET.workloads_of(d.name) if "smoke" in w.tags]
# the fast tier: per family, the definition with the fewest value heads and its first smoke workload; the others
# are in the slow tier (tests/references runs every family against float64 ground truth in the fast tier too)
FAST = {}
for _d in sorted(KDA, key=lambda d: (d.const_axes.get("num_v_heads", d.const_axes.get("num_heads", 0)), d.name)):
    FAST.setdefault(_d.tag("stage"), _d)


def tiered(params, ids, fast):
    """pytest params, those for which fast(param) is false marked slow."""
    return [pytest.param(*(x if isinstance(x, tuple) else (x,)), id=i, marks=() if fast(x) else pytest.mark.slow)
            for x, i in zip(params, ids)]


def family(definition) -> str:
    return definition.tag("stage")


def fp32(inputs: dict) -> dict:
    return {k: (v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in inputs.items()}


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def rms_rel(ref: torch.Tensor, out: torch.Tensor) -> float:
    ref, out = ref.double(), out.double()
    return ((ref - out).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def assert_agrees(name: str, ref: torch.Tensor, out: torch.Tensor, bound: float = 2e-6) -> None:
    assert ref.shape == out.shape, (name, ref.shape, out.shape)
    assert torch.isfinite(out).all(), f"{name}: non-finite values"
    err = rms_rel(ref, out)
    assert err < bound, f"{name}: RMS-relative error {err:.2e} >= {bound:.0e}"


def l2(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def lower_bound(definition):
    return float(definition.tag("lower_bound")) if definition.tag("gate") == "safe" else None


def naive_gate(definition, g_raw, A_log, dt_bias):
    if lower_bound(definition) is None:
        return fla_gate.naive_kda_gate(g_raw, A_log, dt_bias.reshape(-1))
    return fla_gate.naive_kda_lowerbound_gate(g_raw, A_log, dt_bias.reshape(-1), lower_bound=lower_bound(definition))


# --------------------------------------------------------------------------- ground truth per family

def truth_prefill(d, x):
    g = naive_gate(d, x["g_raw"], x["A_log"], x["dt_bias"])
    cu = x["cu_seqlens"].tolist()
    o, states = torch.zeros_like(x["v"]), []
    for n, (a, e) in enumerate(zip(cu[:-1], cu[1:])):
        h0 = None if x["initial_state"] is None else x["initial_state"][n].transpose(-1, -2)[None]  # [V,K] -> [K,V]
        o_n, s_n = fla_naive.naive_recurrent_kda(
            l2(x["q"][a:e])[None], l2(x["k"][a:e])[None], x["v"][a:e][None], g[a:e][None],
            torch.sigmoid(x["b"][a:e])[None], scale=x["scale"], initial_state=h0, output_final_state=True)
        o[a:e] = o_n[0]
        states.append(s_n[0].transpose(-1, -2))
    return o, torch.stack(states)


def truth_prefill_chunk_states(d, x):
    """truth_prefill, plus the state before every 64-token chunk: the naive final state of each sequence cut
    after 64 * c tokens (c = 0: the initial state, or zeros)."""
    o, final = truth_prefill(d, x)
    cu = x["cu_seqlens"].tolist()
    chunks = []
    for n, (a, e) in enumerate(zip(cu[:-1], cu[1:])):
        for c in range(-(-(e - a) // 64)):
            cut = dict(x, q=x["q"][a:a + 64 * c], k=x["k"][a:a + 64 * c], v=x["v"][a:a + 64 * c],
                       g_raw=x["g_raw"][a:a + 64 * c], b=x["b"][a:a + 64 * c],
                       initial_state=None if x["initial_state"] is None else x["initial_state"][n:n + 1],
                       cu_seqlens=torch.tensor([0, 64 * c]))
            if c == 0:
                h0 = x["initial_state"]
                chunks.append(torch.zeros_like(final[0]) if h0 is None else h0[n])
            else:
                chunks.append(truth_prefill(d, cut)[1][0])
    return o, final, torch.stack(chunks)


def truth_pool(d, x):
    """decode ([B, ...]) and mtp ([B, T, ...]): one naive run per request from its slot (rows of slot -1 pad)."""
    mtp = x["q"].dim() == 4
    pool, slots = x["state_pool"], x["state_indices"].tolist()
    new_pool, o = pool.clone(), torch.zeros_like(x["v"])
    for i, slot in enumerate(slots):
        if slot < 0:  # a padding row: o stays zero, nothing is written
            continue
        pick = (lambda t, i=i: t[i]) if mtp else (lambda t, i=i: t[i:i + 1])  # -> [T, ...]
        g = naive_gate(d, pick(x["g_raw"]), x["A_log"], x["dt_bias"])
        o_i, s_i = fla_naive.naive_recurrent_kda(
            l2(pick(x["q"]))[None], l2(pick(x["k"]))[None], pick(x["v"])[None], g[None],
            torch.sigmoid(pick(x["b"]))[None], scale=x["scale"],
            initial_state=pool[slot].transpose(-1, -2)[None], output_final_state=True)
        o[i] = o_i[0] if mtp else o_i[0, 0]
        new_pool[slot] = s_i[0].transpose(-1, -2)
    return o, new_pool


def truth_forward(d, x):
    return fla_naive.naive_recurrent_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=x["scale"],
                                         initial_state=x["initial_state"], output_final_state=True)


def truth_backward(d, x):
    if "cu_seqlens" in x:
        return truth_backward_packed(d, x)
    leaves = {k: x[k].clone().requires_grad_() for k in ("q", "k", "v", "g", "beta", "initial_state")}
    o, s = fla_naive.naive_recurrent_kda(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"],
                                         scale=x["scale"], initial_state=leaves["initial_state"], output_final_state=True)
    ((o * x["do"]).sum() + (s * x["dht"]).sum()).backward()
    return tuple(leaves[k].grad for k in ("q", "k", "v", "g", "beta", "initial_state"))


def truth_backward_packed(d, x):
    """Packed backward (precomputed, or through the in-op gate / L2 norm / beta sigmoid): one naive run per
    sequence; gradients of every input the definition differentiates (output d<name>, dh0 = initial_state)."""
    names = ["initial_state" if out == "dh0" else out[1:] for out in d.outputs]
    leaves = {k: x[k].clone().requires_grad_() for k in names}
    if "g_raw" in x:
        q, k = l2(leaves["q"]), l2(leaves["k"])
        g = naive_gate(d, leaves["g_raw"], leaves["A_log"], leaves["dt_bias"])
        beta = torch.sigmoid(leaves["b"])
    else:
        q, k, g, beta = leaves["q"], leaves["k"], leaves["g"], leaves["beta"]
    cu = x["cu_seqlens"].tolist()
    loss = 0.0
    for n, (a, e) in enumerate(zip(cu[:-1], cu[1:])):
        o, s = fla_naive.naive_recurrent_kda(q[a:e][None], k[a:e][None], leaves["v"][a:e][None], g[a:e][None],
                                             beta[a:e][None], scale=x["scale"],
                                             initial_state=leaves["initial_state"][n][None], output_final_state=True)
        loss = loss + (o[0] * x["do"][a:e]).sum() + (s[0] * x["dht"][n]).sum()
    loss.backward()
    return tuple(leaves[k].grad for k in names)


def truth_gate(d, x):
    return naive_gate(d, x["g_raw"], x["A_log"], x["dt_bias"])


def truth_spec_verify(d, x):
    """Real rows (indices >= 0): one naive run per request and prefix, from the slot of its last accepted
    token; the state after token t goes to state_indices[n, t]. Padding rows: o zero, nothing written."""
    pool, idx = x["state_pool"], x["state_indices"].tolist()
    new_pool, o = pool.clone(), torch.zeros_like(x["v"])
    for i, row in enumerate(idx):
        if row[0] < 0:
            continue
        h0 = pool[row[int(x["num_accepted_tokens"][i]) - 1]].transpose(-1, -2)[None]
        g = naive_gate(d, x["g_raw"][i], x["A_log"], x["dt_bias"])
        for t in range(len(row)):
            o_i, s_i = fla_naive.naive_recurrent_kda(
                l2(x["q"][i, :t + 1])[None], l2(x["k"][i, :t + 1])[None], x["v"][i, :t + 1][None], g[None, :t + 1],
                torch.sigmoid(x["b"][i, :t + 1])[None], scale=x["scale"], initial_state=h0, output_final_state=True)
            new_pool[row[t]] = s_i[0].transpose(-1, -2)
        o[i] = o_i[0]
    return o, new_pool


def truth_fused_decode(d, x):
    """Per live row (slot > 0): the convolution + SiLU written out in float32 and rounded to bf16 (the spec's
    rounding point), fla's naive recurrence from the slot's state on the q, k, v it gives, and torch's rms_norm of
    the bf16-rounded output times norm_weight * sigmoid(output_gate), rounded to bf16. Rows of slot <= 0 pad."""
    H, D = d.const_axes["num_heads"], d.const_axes["head_dim_k"]
    w = x["conv_weight"].permute(0, 2, 1).reshape(3 * H * D, -1)         # [channel, tap]
    conv, pool = x["conv_state"].clone(), x["state_pool"].clone()
    out = torch.zeros(x["output_gate"].shape, dtype=torch.bfloat16)
    for i, slot in enumerate(x["state_indices"].tolist()):
        if slot <= 0:
            continue
        win = x["conv_state"][slot]                                       # [channel, 3], oldest first
        y = win[:, 0] * w[:, 0] + win[:, 1] * w[:, 1] + win[:, 2] * w[:, 2] + x["x"][i] * w[:, 3]
        q, k, v = (y * torch.sigmoid(y)).bfloat16().float().reshape(3, 1, 1, H, D).unbind(0)
        g = naive_gate(d, x["g_raw"][i:i + 1], x["A_log"], x["dt_bias"])
        o, s = fla_naive.naive_recurrent_kda(
            l2(q), l2(k), v, g[None], torch.sigmoid(x["b"][i:i + 1])[None], scale=x["scale"],
            initial_state=pool[slot].float().transpose(-1, -2)[None], output_final_state=True)
        o = o[0, 0].bfloat16().float()                                    # [H, D]
        normed = torch.nn.functional.rms_norm(o, (D,), eps=1e-5) * x["norm_weight"]
        out[i] = (normed * torch.sigmoid(x["output_gate"][i])).bfloat16()
        conv[slot] = torch.cat([win[:, 1:], x["x"][i][:, None]], dim=1)
        pool[slot] = s[0].transpose(-1, -2).to(pool.dtype)
    return out, conv, pool


TRUTH = {"prefill": truth_prefill, "decode": truth_pool, "mtp": truth_pool, "forward": truth_forward,
         "backward": truth_backward, "gate": truth_gate, "spec_verify": truth_spec_verify,
         "prefill_chunk_states": truth_prefill_chunk_states, "fused_decode": truth_fused_decode}
# Outputs rounded to bf16 inside the op (fused decode's recurrent output, rounded before the norm, and its normed
# output): where fla's float32 sums differ from the reference's in the last bit, a few elements round to the
# neighbouring bf16 value (2^-8 relative each), an RMS-relative difference of ~1e-4 over a smoke workload.
OUTPUT_BOUNDS = {"fused_decode": {"o": 5e-4}}


# --------------------------------------------------------------------------- references vs ground truth

@pytest.mark.parametrize("definition,workload", tiered(
    SMOKE, [f"{d.name}-{w.uuid[:8]}" for d, w in SMOKE],
    lambda dw: FAST.get(family(dw[0])) is dw[0] and next(w for d, w in SMOKE if d is dw[0]) is dw[1]))
def test_reference_matches_fla_naive(definition, workload):
    run = compile_reference(definition.reference, definition.name)
    inputs = make_inputs(definition, workload, seed=1234, device="cpu")
    x = fp32(inputs)
    out = as_tuple(run(**x))
    truth = as_tuple(TRUTH[family(definition)](definition, x))
    assert len(out) == len(definition.outputs) == len(truth)
    bounds = OUTPUT_BOUNDS.get(family(definition), {})
    for name, o, t in zip(definition.outputs, out, truth):
        assert_agrees(f"{definition.name}.{name}", t, o, bounds.get(name, 2e-6))


@pytest.mark.parametrize("definition", tiered(KDA, [d.name for d in KDA], lambda d: FAST.get(family(d)) is d))
def test_reference_output_dtypes_and_no_input_mutation(definition):
    """On the definition's own dtypes (on its smoke workload, or its smallest): outputs have the declared shapes and
    dtypes, inputs are unchanged."""
    workload = min(DATASET.workloads_of(definition.name),
                   key=lambda w: ("smoke" not in w.tags, math.prod(w.axes.values())))
    inputs = make_inputs(definition, workload, seed=7, device="cpu")
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    out = as_tuple(compile_reference(definition.reference, definition.name)(**inputs))
    axes = {**definition.const_axes, **workload.axes}
    for (name, spec), o in zip(definition.outputs.items(), out):
        assert o.dtype == torch_dtype(spec.dtype), (name, o.dtype, spec.dtype)
        assert list(o.shape) == definition.shape_of(spec, axes), (name, o.shape)
        assert torch.isfinite(o).all(), name
    for k, v in before.items():
        assert torch.equal(v, inputs[k]), f"the reference modified its input {k!r}"


def test_prefill_rejects_zero_length_sequence():
    d = DATASET.definitions["kda_prefill_h8_d128_k_last"]
    run = compile_reference(d.reference, d.name)
    w = next(w for w in DATASET.workloads_of(d.name) if "smoke" in w.tags)
    x = make_inputs(d, w, seed=5, device="cpu")
    cu = x["cu_seqlens"].clone()
    cu[1] = cu[0]
    with pytest.raises(ValueError, match="zero-length"):
        run(**dict(x, cu_seqlens=cu, initial_state=None))


# --------------------------------------------------------------------------- tolerances separate right from wrong

def within(tol, ref: torch.Tensor, out: torch.Tensor) -> bool:
    """The definition's tolerance, read as docs/FORMAT.md describes it."""
    ref, out = ref.double(), out.double()
    ok = rms_rel(ref, out) <= tol.max_rms_rel_error
    cos = torch.nn.functional.cosine_similarity(ref.flatten(), out.flatten(), dim=0).item()
    ok &= cos >= tol.min_cosine
    matched = ((ref - out).abs() <= tol.atol + tol.rtol * ref.abs()).double().mean().item()
    return ok and matched >= tol.min_matched_ratio


def test_prefill_tolerance_accepts_bf16_rounding_and_rejects_bugs():
    d = DATASET.definitions["kda_prefill_h8_d128_k_last"]
    run = compile_reference(d.reference, d.name)
    w = next(w for w in DATASET.workloads_of(d.name) if "smoke" in w.tags and len(w.seq_lens) == 3)
    x = make_inputs(d, w, seed=11, device="cpu")
    tol_o, tol_s = d.outputs["o"].tolerance, d.outputs["final_state"].tolerance
    o, s = run(**fp32(x))  # float32 outputs: the exact answer for these inputs
    # a correct kernel: bf16 output rounding (and bf16-rounded state for the state check)
    assert within(tol_o, o, o.bfloat16()) and within(tol_s, s, s.bfloat16())
    # bugs a kernel can have
    cu = x["cu_seqlens"]
    bugs = {
        "initial state dropped": dict(x, initial_state=None),
        "state leaks across sequences": dict(x, cu_seqlens=cu[[0, -1]], initial_state=x["initial_state"][:1]),
        "gate without dt_bias": dict(x, dt_bias=torch.zeros_like(x["dt_bias"])),
        "beta = 1 (sigmoid skipped)": dict(x, b=torch.full_like(x["b"], 30.0)),
        "scale = 1": dict(x, scale=1.0),
    }
    for bug, inputs in bugs.items():
        o_bug, s_bug = run(**fp32(inputs))
        if o_bug.shape != o.shape or s_bug.shape != s.shape:  # leak: compare the last sequence's state
            assert not within(tol_s, s[-1], s_bug[-1]), bug
        else:
            assert not (within(tol_o, o, o_bug) and within(tol_s, s, s_bug)), bug
    # a single wrong output token fails o's element-wise bound
    o_bug = o.clone()
    mid = o.shape[0] // 2
    o_bug[mid] = -o_bug[mid]
    assert not within(tol_o, o, o_bug)


BF16_MUTANTS = {
    # float32 state, rounded to nearest at the store: the reference, with the float32 state off by a relative 1e-5
    # (another summation order, approximate exp / rsqrt) before the store
    "float32 off by 1e-5": ("new_state_pool[slots] = P.to(state_pool.dtype)",
                            "new_state_pool[slots] = (P * (1 + 1e-5 * torch.randn(P.shape, generator="
                            "torch.Generator().manual_seed(3)))).to(state_pool.dtype)"),
    "truncated at the store": ("new_state_pool[slots] = P.to(state_pool.dtype)",
                               "new_state_pool[slots] = (P.contiguous().view(torch.int32) & -65536)"
                               ".view(torch.float32).to(state_pool.dtype)"),
    "gate skipped": ("P = P * decay[", "P = P * 1 + 0 * decay["),
    "bf16 between tokens": ("        o[:R, t] = (P @ qs[:, t, :, :, None])[..., 0]",
                            "        P = P.to(state_pool.dtype).float()\n"
                            "        o[:R, t] = (P @ qs[:, t, :, :, None])[..., 0]"),
}


@pytest.mark.parametrize("stage", ["decode", "mtp"])
def test_bf16_state_tolerance_accepts_float32_arithmetic_and_rejects_other_conventions(stage):
    """new_state_pool's tolerance (the runner's verdict, kda_trace.compare) on a bf16 pool: a float32 state off by
    1e-5 before the one rounding passes; truncating at the store, rounding after every token (MTP) and a skipped
    gate fail. 5 requests (1 of them padding) in a pool of 9, 4 tokens each for MTP."""
    from kda_trace.compare import compare_output, tolerance_for
    from kda_trace.schema import Workload

    d = DATASET.definitions[f"kda_{stage}_h12_d128_k_last_safe_gate_bf16_state"]
    axes = {"batch_size": 5, **({"num_tokens": 4} if stage == "mtp" else {}), "pool_size": 9}
    w = Workload(uuid="5b1f0c62-9d6e-4a51-8a7e-0d2f3c4b5a69", axes=axes, tags=[],
                 inputs={**DATASET.workloads_of(d.name)[0].inputs})
    x = make_inputs(d, w, seed=4, device="cpu")
    ref = as_tuple(compile_reference(d.reference, d.name)(**x))[1]
    tol = tolerance_for(d, "new_state_pool")
    verdicts = {}
    for bug, (old, new) in BF16_MUTANTS.items():
        if old not in d.reference:
            continue
        out = as_tuple(compile_reference(d.reference.replace(old, new), d.name + "_mutant")(**x))[1]
        verdicts[bug] = compare_output(d, "new_state_pool", ref, out, tol)
    assert verdicts["float32 off by 1e-5"].passed, verdicts["float32 off by 1e-5"].reason
    assert verdicts["float32 off by 1e-5"].max_row_rel_error < tol.max_row_rel_error / 2
    wrong = ["truncated at the store", "gate skipped"] + (["bf16 between tokens"] if stage == "mtp" else [])
    for bug in wrong:
        m = verdicts[bug]
        assert not m.passed and m.max_row_rel_error > 2.5 * tol.max_row_rel_error, (bug, m.max_row_rel_error)


# --------------------------------------------------------------------------- dataset and coverage

def test_dataset_loads_without_problems():
    problems = [str(p) for p in DATASET.problems if "kda" in str(p)]
    assert not problems, problems[:5]
    assert len(KDA) >= 20


def test_checked_in_files_match_the_build_script():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import build_kda_dataset
    finally:
        sys.path.pop(0)
    built = build_kda_dataset.build()
    for name, (defn, wls) in built.items():
        assert json.loads((REPO / "definitions" / "kda" / f"{name}.json").read_text()) == defn, name
        lines = (REPO / "workloads" / "kda" / f"{name}.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == wls, name
    assert set(built) == {d.name for d in KDA}


@pytest.mark.parametrize("definition", KDA, ids=[d.name for d in KDA])
def test_every_definition_has_smoke_and_tags(definition):
    """A smoke workload in every definition: the CPU run covers every definition."""
    wls = DATASET.workloads_of(definition.name)
    smoke = [w for w in wls if "smoke" in w.tags]
    assert smoke, "no smoke workload"
    for w in smoke:  # small enough for the CPU interpreter
        axes = {**definition.const_axes, **w.axes}
        tokens = axes.get("total_seq_len") or axes.get("num_tokens", 1) * axes.get("batch_size", 1) * axes.get("seq_len", 1)
        assert tokens <= 64 and axes.get("batch_size", 1) <= 4, w.axes
    for key in ("stage", "model", "gate", "tp"):
        assert definition.tag(key), f"missing tag {key}"
    if family(definition) != "gate":
        for key in ("beta", "qk_norm", "state_layout", "batch"):
            assert definition.tag(key), f"missing tag {key}"
    if family(definition) == "prefill":
        stress = [w for w in wls if "stress" in w.tags]
        assert stress and all(w.axes["total_seq_len"] * definition.const_axes["num_heads"] * 128 > 2 ** 31 for w in stress)
    assert len({w.uuid for w in wls}) == len(wls)


def test_prefill_workloads_cover_the_edge_cases():
    d = DATASET.definitions["kda_prefill_h32_d128_k_last"]
    wls = DATASET.workloads_of(d.name)
    lens = [n for w in wls for n in w.seq_lens]
    totals = [w.axes["total_seq_len"] for w in wls if "stress" not in w.tags]
    assert 1 in lens and any(n < 64 for n in lens) and any(t % 64 for t in totals)
    assert min(totals) <= 64 and max(totals) == 65536
    with_state = [w.inputs["initial_state"].generator is None for w in wls]
    assert any(with_state) and not all(with_state)


def test_coverage_every_engine_cell_is_covered():
    matrix = coverage_matrix(KDA, DATASET.workloads)
    assert matrix.missing == [], matrix.missing
    text = render_coverage(matrix)
    assert "kimi-k3 tp4 (h24)" in text and "required cells missing: none" in text
    assert set(matrix.features["state_layout"]) == {"kv", "vk"}
    assert set(matrix.features["gate"]) == {"unbounded", "safe", "precomputed"}


def test_coverage_reports_a_missing_cell():
    without_mtp = [d for d in KDA if d.name != "kda_mtp_h24_d128_k_last_safe_gate"]
    matrix = coverage_matrix(without_mtp, DATASET.workloads)
    assert matrix.missing == [("kimi-k3", 4, "mtp")]
    assert "MISSING" in render_coverage(matrix)


def test_backward_reference_runs_under_inference_mode():
    """Runners may call references under torch.inference_mode(); the backward reference still differentiates."""
    d = DATASET.definitions["kda_bwd_h32_d128_v_last"]
    run = compile_reference(d.reference, d.name)
    w = next(w for w in DATASET.workloads_of(d.name) if "edge" in w.tags and w.axes["seq_len"] == 1)
    x = make_inputs(d, w, seed=2, device="cpu")
    plain = run(**x)
    with torch.inference_mode():
        inside = run(**{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in x.items()})
    assert all(torch.equal(a, b) for a, b in zip(plain, inside))
