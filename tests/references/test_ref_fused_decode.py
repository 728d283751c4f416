"""fused_decode family (causal convolution + SiLU, one KDA step against a state pool, gated RMSNorm; FlashInfer's
fused_kda_decode): the reference against an independent float64 ground truth, stage by stage and end to end, and
against the dataset's own decode reference composed with a convolution and a norm written here.

The reference rounds to bfloat16 at two points inside the op (the convolution's output, and the recurrent output
before the norm), as the kernel does. A float64 truth rounding at the same points agrees with the float32
reference except where a float32 value lies within its own rounding error of a bf16 rounding boundary: there the
two round to neighbouring values (rare, one ulp). So each stage is judged alone at float32 level on the same
inputs (test_stages_match_float64), and the whole op at the level those rare flips allow (test_matches_float64_truth);
the convolution pool, a copy, is bit-exact throughout.
"""

from __future__ import annotations

import ground_truth as gt
import pytest
import token_loop_truth as tl
import torch
import torch.nn.functional as F
from conftest import (
    assert_bits_equal,
    custom_workload,
    dataset,
    family_params,
    inputs_of,
    reference_runs,
    report,
    run_reference,
    upcast,
    workload_params,
)
from coverage_cells import covers, observe

from kda_trace.compare import compare_output, tolerance_for
from kda_trace.schema import Tolerance

FAMILY = "fused_decode"
f64 = torch.float64
NULL_SLOTS = {"kind": "slot_indices", "pool_axis": "pool_size", "first_slot": 1}
# The whole op against the float64 truth: o within one bf16 ulp of the recurrent output's rounding plus half an
# ulp of the output's (rtol 2^-7) element by element but for 1e-4 of them (rows where a q / k / v element or the
# recurrent output rounded to the neighbouring bf16 value: up to ~1.3 ulps of the output, at batch 128); the states as float32 arithmetic on inputs where a rare
# q / k / v element may sit one bf16 ulp away (a 2^-8 relative change of one element moves a state row by ~1e-4).
END_TO_END = {
    "o": Tolerance(atol=2e-3, rtol=2.0 ** -7, min_matched_ratio=0.9999, max_rms_rel_error=3e-3, min_cosine=0.99999),
    "new_state_pool": Tolerance(atol=1e-3, rtol=1e-3, min_matched_ratio=1.0, max_rms_rel_error=1e-4,
                                min_cosine=0.999999),
}
NORM_EPS = 1e-5      # FlashInfer's default norm_eps, the one the definitions' descriptions name
STAGE_RMS = 1e-6     # float32 stage against float64: RMS-relative error
STAGE_MAX = 1e-4     # and the largest element error relative to the largest |truth|


def namespace(d) -> dict:
    """The reference file's functions (the definition's `reference` text, executed as a module)."""
    ns: dict = {}
    exec(compile(d.reference, f"<{d.name} reference>", "exec"), ns)  # noqa: S102 - the dataset's own reference
    return ns


def workload(d, batch_size=4, pool_size=7, pad=1, pad_value=-1):
    """A few requests (`pad` padding rows after them) in pools larger than the batch, slot 0 the null slot."""
    gen = {**NULL_SLOTS, "pad_rows": pad, "pad_value": pad_value} if pad else NULL_SLOTS
    return custom_workload(d, {"batch_size": batch_size, "pool_size": pool_size}, generators={"state_indices": gen})


def observe_cells(d) -> None:
    """The cells the float64 truth exercises (the coverage guard checks them against the declaration)."""
    observe(d.name, batch="pool", direction="forward", gate=d.tag("gate"), beta="logits", qk_norm="l2",
            state_layout="vk", initial_state="given", final_state="returned", gva="off", kv_dims="equal")


# ------------------------------------------------------------------------------------- float64 truth
def conv64(x, conv_weight, window):
    """The depthwise causal convolution as F.conv1d in float64 over [window, x] (oldest first), then SiLU."""
    C = x.shape[-1]
    w = conv_weight.to(f64).permute(0, 2, 1).reshape(C, 1, -1)             # [channel, 1, tap]
    seq = torch.cat([window.to(f64), x.to(f64)[:, :, None]], dim=2)        # [R, C, width]
    y = F.conv1d(seq, w, groups=C)[:, :, 0]
    return y * gt.sigmoid(y)


def step64(d, q, k, v, g_raw, b, S_vk, A_log, dt_bias, scale):
    """One token of one request: token_loop_truth's float64 recurrence from a K-last state [H, V, K]."""
    lb = d.tag("lower_bound")
    g = gt.gate(g_raw[None], A_log, dt_bias, None if lb is None else float(lb))
    o, S = tl.recurrence(gt.l2_normalize(q[None]), gt.l2_normalize(k[None]), v[None], g, gt.sigmoid(b[None]),
                         S_vk.to(f64).transpose(-1, -2), scale)
    return o[0], S.transpose(-1, -2)


def norm64(o, output_gate, norm_weight, eps):
    o = o.to(f64)
    return o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + eps) * norm_weight.to(f64) * gt.sigmoid(output_gate)


def truth(d, x) -> dict[str, torch.Tensor]:
    """The op in float64, rounding to bf16 where the specification does (the convolution's output, the recurrent
    output); o unrounded, the state pool float64 (a bf16 pool: rounded once at the store), rows of slot <= 0 pad."""
    H, D = d.const_axes["num_heads"], d.const_axes["head_dim_k"]
    o = torch.zeros(x["output_gate"].shape, dtype=f64)
    conv = x["conv_state"].clone()
    pool = x["state_pool"].to(f64) if x["state_pool"].dtype == torch.float32 else x["state_pool"].clone()
    for i, slot in enumerate(x["state_indices"].tolist()):
        if slot <= 0:
            continue
        mixed = conv64(x["x"][i:i + 1], x["conv_weight"], x["conv_state"][slot:slot + 1])[0]
        q, k, v = mixed.to(torch.bfloat16).to(f64).reshape(3, H, D).unbind(0)
        o_i, S = step64(d, q, k, v, x["g_raw"][i], x["b"][i], x["state_pool"][slot], x["A_log"], x["dt_bias"],
                        float(x["scale"]))
        o[i] = norm64(o_i.to(torch.bfloat16), x["output_gate"][i], x["norm_weight"], NORM_EPS)
        conv[slot] = torch.cat([x["conv_state"][slot, :, 1:], x["x"][i][:, None].to(conv.dtype)], dim=1)
        pool[slot] = S.to(pool.dtype)
    return {"o": o, "new_conv_state": conv, "new_state_pool": pool}


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in bf16 ulps between two bf16 tensors (order of their bit patterns on a monotone line)."""
    ia, ib = a.view(torch.int16).to(torch.int32), b.view(torch.int16).to(torch.int32)
    ia = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    ib = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    return (ia - ib).abs()


def check_bf16_pool(d, want: torch.Tensor, got: torch.Tensor) -> None:
    """A bf16 pool against the truth rounded once at the store: all but 1e-3 of the elements equal, all but 1e-5 of
    them at most one ulp away (the others in rows whose q / k / v had an element one bf16 ulp away after the
    convolution's rounding), and the definition's own tolerance (the runner's verdict) met."""
    distance = ulps(got, want)
    distance[(got.double() - want.double()).abs() <= 1e-6] = 0
    far = (distance > 1).double().mean().item()
    off = (distance > 0).double().mean().item()
    assert far <= 1e-5 and off <= 1e-3, (f"{d.name}: {far:.2e} of the stored elements more than one bf16 ulp from the "
                                         f"truth, {off:.2e} off it")
    m = compare_output(d, "new_state_pool", want.cpu(), got.cpu(), tolerance_for(d, "new_state_pool"))
    assert m.passed, report(d, "new_state_pool", m, "bf16 pool vs the float64 truth rounded once")


def close(what: str, truth: torch.Tensor, got: torch.Tensor) -> None:
    """A float32 stage against float64: RMS-relative <= STAGE_RMS, every element within STAGE_MAX of max |truth|."""
    truth, got = truth.to(f64), got.to(f64)
    assert truth.shape == got.shape, (what, truth.shape, got.shape)
    err = (truth - got)
    rms = (err.pow(2).mean().sqrt() / truth.pow(2).mean().sqrt()).item()
    worst = (err.abs().max() / truth.abs().max()).item()
    assert rms <= STAGE_RMS and worst <= STAGE_MAX, f"{what}: RMS-relative {rms:.2e}, worst element {worst:.2e}"


# ------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_stages_match_float64(d):
    """Each stage of the reference on the same inputs as the float64 truth's: the convolution + SiLU, the KDA
    step (gate, beta, L2 norm, delta rule against the K-last state) and the gated RMSNorm, at float32 level."""
    ns = namespace(d)
    H, D = d.const_axes["num_heads"], d.const_axes["head_dim_k"]
    x = upcast(inputs_of(d, workload(d, batch_size=3, pad=0)))
    slots = x["state_indices"].long()
    window = x["conv_state"][slots]
    close(f"{d.name}: convolution + SiLU", conv64(x["x"], x["conv_weight"], window),
          ns["causal_conv_silu"](x["x"], x["conv_weight"], window))
    mixed = ns["causal_conv_silu"](x["x"], x["conv_weight"], window).to(torch.bfloat16).float()
    q, k, v = mixed.reshape(3, 3, H, D).unbind(1)
    o, P = ns["kda_step"](q, k, v, x["g_raw"], x["A_log"], x["dt_bias"], x["b"], x["state_pool"][slots].float(),
                          float(x["scale"]))
    for i, slot in enumerate(slots.tolist()):
        o64, S64 = step64(d, q[i], k[i], v[i], x["g_raw"][i], x["b"][i], x["state_pool"][slot], x["A_log"],
                          x["dt_bias"], float(x["scale"]))
        close(f"{d.name}: KDA step o, row {i}", o64, o[i])
        close(f"{d.name}: KDA step state, row {i}", S64, P[i])
    o = o.to(torch.bfloat16).float()
    close(f"{d.name}: gated RMSNorm", norm64(o, x["output_gate"], x["norm_weight"], NORM_EPS),
          ns["gated_rms_norm"](o, x["output_gate"], x["norm_weight"]))


@covers("fused_decode", batch=("pool",), direction=("forward",), gate=("safe", "unbounded"), beta=("logits",),
        qk_norm=("l2",), initial_state=("given",), final_state=("returned",), gva=("off",), kv_dims=("equal",),
        state_layout=("vk",))
@pytest.mark.parametrize("d", family_params(FAMILY))
@pytest.mark.parametrize("pad_value", [-1, 0])
def test_matches_float64_truth(d, pad_value):
    """Three requests and one padding row (slot -1, or the null slot 0) in pools of seven: the reference's
    shapes and dtypes, its inputs untouched, its bf16-input run bit-identical to its float32-input run; against
    the float64 truth: o (zero in the padding row), the convolution pool bit-exact, the state pool (a bf16 pool:
    every element within one ulp of the truth rounded once, all but 1e-3 of them equal to it), every slot no
    live row names (the null slot included) bit-identical to the input."""
    w = workload(d, pad_value=pad_value)
    x, out, x32, out32 = reference_runs(d, w)
    observe_cells(d)
    want = truth(d, x)
    assert bool((out["o"][3:] == 0).all()), f"{d.name}: o of the padding row is not zero"
    _judge(d, "o", want["o"], out["o"])
    assert_bits_equal(out["new_conv_state"], want["new_conv_state"], f"{d.name}: new_conv_state vs the moved window")
    if x["state_pool"].dtype == torch.bfloat16:
        check_bf16_pool(d, want["new_state_pool"], out["new_state_pool"])
    else:
        _judge(d, "new_state_pool", want["new_state_pool"], out["new_state_pool"])
    live = x["state_indices"][x["state_indices"] > 0].long()
    untouched = torch.ones(x["state_pool"].shape[0], dtype=torch.bool)
    untouched[live] = False
    assert bool(untouched[0]), "the null slot was named by a live row"
    assert_bits_equal(out["new_state_pool"][untouched], x["state_pool"][untouched], f"{d.name}: untouched state slots")
    assert_bits_equal(out["new_conv_state"][untouched], x["conv_state"][untouched], f"{d.name}: untouched conv slots")


@covers("fused_decode", batch=("pool",), gate=("safe", "unbounded"))
@pytest.mark.parametrize("d,w", workload_params(FAMILY))
def test_dataset_workloads(d, w):
    """Every CPU-sized dataset workload (slow tier) against the float64 truth, judged as above."""
    x = inputs_of(d, w)
    observe_cells(d)
    out = run_reference(d, x)
    want = truth(d, x)
    _judge(d, "o", want["o"], out["o"])
    assert_bits_equal(out["new_conv_state"], want["new_conv_state"], f"{d.name}: new_conv_state vs the moved window")
    if x["state_pool"].dtype == torch.float32:
        _judge(d, "new_state_pool", want["new_state_pool"], out["new_state_pool"])
    else:
        check_bf16_pool(d, want["new_state_pool"], out["new_state_pool"])


def _judge(d, name, want, got):
    """The verdict of kda_trace.compare with END_TO_END's tolerance for this output."""
    m = compare_output(d, name, want.cpu(), got.cpu(), END_TO_END[name])
    if not m.passed:
        pytest.fail(report(d, name, m, "reference vs float64 truth"), pytrace=False)


def decode_definition(d):
    """The dataset's decode definition with the same heads, gate and pool dtype."""
    name = d.name.replace("kda_fused_decode_", "kda_decode_")
    return dataset().definitions[name]


@pytest.mark.parametrize("d", family_params(FAMILY))
def test_composes_the_decode_reference(d):
    """The fused reference equals the composition of its parts: the convolution written out here (float32, taps
    oldest first, SiLU, rounded to bf16), the dataset's decode reference of the same heads, gate and pool dtype on
    the q, k, v it gives (live rows only), and torch's rms_norm of decode's o times norm_weight *
    sigmoid(output_gate). The pools bit for bit; o within the rounding of the output (rms_norm sums in another
    order)."""
    dec = decode_definition(d)
    H, D = d.const_axes["num_heads"], d.const_axes["head_dim_k"]
    x = inputs_of(d, workload(d, batch_size=4, pool_size=9, pad=1, pad_value=0))
    out = run_reference(d, x)
    live = (x["state_indices"] > 0).nonzero()[:, 0]
    slots = x["state_indices"][live].long()
    win = x["conv_state"][slots].float()
    w = x["conv_weight"].permute(0, 2, 1).reshape(3 * H * D, -1)
    y = win[:, :, 0] * w[:, 0] + win[:, :, 1] * w[:, 1] + win[:, :, 2] * w[:, 2] + x["x"][live].float() * w[:, 3]
    q, k, v = (y * torch.sigmoid(y)).to(torch.bfloat16).reshape(len(live), 3, H, D).unbind(1)
    idx_dtype = dec.inputs["state_indices"].dtype.value
    o, pool = run_reference(dec, {"q": q, "k": k, "v": v, "g_raw": x["g_raw"][live], "A_log": x["A_log"],
                                  "dt_bias": x["dt_bias"], "b": x["b"][live], "state_pool": x["state_pool"],
                                  "state_indices": slots.to(getattr(torch, idx_dtype)),
                                  "scale": x["scale"]}).values()
    normed = F.rms_norm(o.float(), (D,), eps=NORM_EPS) * x["norm_weight"] * torch.sigmoid(x["output_gate"][live].float())
    assert_bits_equal(out["new_state_pool"], pool, f"{d.name}: new_state_pool vs {dec.name}'s")
    conv = x["conv_state"].clone()
    conv[slots] = torch.cat([x["conv_state"][slots][:, :, 1:], x["x"][live][:, :, None]], dim=2)
    assert_bits_equal(out["new_conv_state"], conv, f"{d.name}: new_conv_state vs the window moved by one")
    err = (out["o"][live].double() - normed.double()).abs() / normed.double().abs().clamp_min(1e-6)
    assert err.max().item() <= 2.0 ** -8, f"{d.name}: o is {err.max().item():.2e} (relative) from the composition"
    assert bool((out["o"][x["state_indices"] <= 0] == 0).all())


@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_padding_rows_anywhere_change_nothing(d):
    """Padding rows (slot -1 and the null slot 0) between and before live rows: their o is zero, they write
    nothing, and the live rows' outputs and both pools are those of the batch without them."""
    x = inputs_of(d, workload(d, batch_size=3, pool_size=6, pad=0))
    ref = run_reference(d, x)
    order = [-1, 0, -1, 1, -1, 2]                     # -1: a padding row; else the original row
    rows = torch.tensor([max(i, 0) for i in order])
    y = {n: (t[rows].clone() if n in ("x", "g_raw", "b", "output_gate", "state_indices") else t) for n, t in x.items()}
    y["state_indices"][torch.tensor([i < 0 for i in order])] = torch.tensor([-1, 0, 0], dtype=torch.int32)
    got = run_reference(d, y)
    real = torch.tensor([i >= 0 for i in order])
    assert bool((got["o"][~real] == 0).all())
    assert_bits_equal(got["o"][real], ref["o"], f"{d.name}: live rows' o with padding rows between them")
    assert_bits_equal(got["new_conv_state"], ref["new_conv_state"], f"{d.name}: new_conv_state with padding rows")
    assert_bits_equal(got["new_state_pool"], ref["new_state_pool"], f"{d.name}: new_state_pool with padding rows")


@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_rejects_repeated_or_out_of_pool_slots(d):
    x = inputs_of(d, workload(d, batch_size=3, pool_size=6, pad=0))
    for bad in ([2, 2, 3], [1, 2, 6]):
        with pytest.raises(ValueError, match="distinct slots"):
            run_reference(d, dict(x, state_indices=torch.tensor(bad, dtype=torch.int32)))
