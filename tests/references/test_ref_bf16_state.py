"""decode and mtp with bfloat16 state pools (`feature:bf16_state`): the reference against a ground truth of
its own, the float64 token-by-token recurrence (token_loop_truth.py) from the stored bf16 state, rounded once
to bf16 at the store.

What the definitions specify, and what is checked here: the stored state is read exactly, the state stays in
(at least) float32 between the tokens of one call, and it is rounded once, to nearest even, when it is stored;
padding rows (slot -1, after the real requests) read and write nothing and their o is zero; slots no real
request names keep their bits. The reference rounds its float32 state, the truth its float64 state: the two
stored values differ only where the float32 state lies within its own rounding error of a bf16 rounding
boundary (a fraction of about 1e-5 of the elements, by one ulp). So: every element within one bf16 ulp of the
truth's, and all but MAX_FLIPS of them bit-identical to it. Storing with truncation, or rounding the state
after every token of an MTP call, moves a quarter to a half of the elements (test_planted_bugs_are_caught).
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_bits_equal, custom_workload, dataset, inputs_of, run_reference
from coverage_cells import family_of

import token_loop_truth as tl

f64 = torch.float64
MAX_FLIPS = 1e-3  # fraction of stored elements allowed one ulp away from the float64 truth's rounding
ATOL = 1e-6  # |difference| below which an element counts as equal (100x the float32 error of |state| < 1)


def bf16_definitions():
    """The bf16-pool definitions of decode and mtp (fused decode's are in test_ref_fused_decode.py); the smallest of
    each family in the fast tier, the others slow."""
    defs = sorted((d for d in dataset().select(op_type="kda") if "bf16_state" in d.tag_values.get("feature", [])
                   and family_of(d) in ("decode", "mtp")),
                  key=lambda d: (d.const_axes["num_v_heads"], d.name))
    fast = {}
    for d in defs:
        fast.setdefault(family_of(d), d)
    return [pytest.param(d, id=d.name, marks=() if d in fast.values() else pytest.mark.slow) for d in defs]


def small_workload(d, batch_size=4, num_tokens=3, pool_size=7, pad=1):
    """A few requests with `pad` padding rows after them, in a pool larger than the batch."""
    axes = {"batch_size": batch_size, **({"num_tokens": num_tokens} if family_of(d) == "mtp" else {}),
            "pool_size": pool_size}
    gens = {"state_indices": {"kind": "slot_indices", "pool_axis": "pool_size", "pad_rows": pad}} if pad else None
    return custom_workload(d, axes, generators=gens)


def truth(d, x) -> dict[str, torch.Tensor]:
    """o (float64) and the new pool (bf16) of the float64 recurrence, request by request, rounded at the store."""
    lb = d.tag("lower_bound")
    mtp = family_of(d) == "mtp"
    idx = x["state_indices"].tolist()
    o = torch.zeros(x["v"].shape, dtype=f64)
    pool = x["state_pool"].clone()
    for i, slot in enumerate(idx):
        if slot < 0:
            continue
        pick = (lambda t, i=i: t[i]) if mtp else (lambda t, i=i: t[i:i + 1])  # -> [T, ...]
        g = tl.gate(pick(x["g_raw"]), x["A_log"], x["dt_bias"], None if lb is None else float(lb))
        S0 = x["state_pool"][slot].to(f64).transpose(-1, -2)          # stored [HV, V, K] -> [HV, K, V], exact
        o_i, S = tl.recurrence(tl.l2_normalize(pick(x["q"])), tl.l2_normalize(pick(x["k"])), pick(x["v"]), g,
                               torch.sigmoid(pick(x["b"]).to(f64)), S0, float(x["scale"]))
        o[i] = o_i if mtp else o_i[0]
        pool[slot] = S.transpose(-1, -2).to(pool.dtype)              # one rounding, float64 -> bf16
    return {"o": o, "new_state_pool": pool}


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in bf16 ulps between two bf16 tensors of the same signs (order of their bit patterns)."""
    ia, ib = a.view(torch.int16).to(torch.int32), b.view(torch.int16).to(torch.int32)
    ia = torch.where(ia < 0, -(ia & 0x7FFF), ia)  # sign-magnitude -> a monotone integer line
    ib = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    return (ia - ib).abs()


def check_against_bf16_truth(d, x, out):
    """The reference's outputs `out` on inputs `x` against truth(d, x); fails with what differs."""
    want = truth(d, x)
    got = out["new_state_pool"]
    assert got.dtype == torch.bfloat16 and got.shape == want["new_state_pool"].shape
    distance = ulps(got, want["new_state_pool"])
    # near zero (values out of cancellation, or two signs of a tiny value) the float32 state's absolute error,
    # ~1e-8 at these magnitudes, can be many ulps of the value: there an absolute ATOL decides
    distance[(got.double() - want["new_state_pool"].double()).abs() <= ATOL] = 0
    flips = (distance > 0).double().mean().item()
    assert int(distance.max()) <= 1, (f"{d.name}: a stored element is {int(distance.max())} bf16 ulps from the "
                                      f"float64 truth rounded once ({flips:.4f} of the elements differ)")
    assert flips <= MAX_FLIPS, (f"{d.name}: {flips:.4f} of the stored elements are one ulp from the float64 truth "
                                f"rounded once (at most {MAX_FLIPS} come from float32 arithmetic)")
    R = int((x["state_indices"] >= 0).sum())
    err = (out["o"][:R].double() - want["o"][:R]).abs().max().item()
    scale = want["o"][:R].abs().max().item()
    assert err <= 2.0 ** -7 * scale + 1e-6, f"{d.name}: o is {err:.3e} from the float64 truth (max |o| {scale:.3e})"
    assert bool((out["o"][R:] == 0).all()), f"{d.name}: o of the padding rows is not zero"
    touched = torch.zeros(got.shape[0], dtype=torch.bool)
    touched[x["state_indices"][:R].long()] = True
    assert_bits_equal(got[~touched], x["state_pool"][~touched], f"{d.name}: slots no real request names")


@pytest.mark.parametrize("d", bf16_definitions())
def test_matches_float64_truth_rounded_at_the_store(d):
    """Three requests and one padding row in a pool of seven bf16 slots."""
    x = inputs_of(d, small_workload(d))
    assert x["state_pool"].dtype == torch.bfloat16 and int((x["state_indices"] < 0).sum()) == 1
    check_against_bf16_truth(d, x, run_reference(d, x))


@pytest.mark.parametrize("d", bf16_definitions())
def test_weak_gate_keeps_updates_below_half_an_ulp_out(d):
    """Decays ~1 (g_raw ~ N(-8, 1)): the new state is the stored one plus small updates, many below half an ulp
    of it. Rounding once at the store (not after every token) decides which of them survive."""
    w = custom_workload(d, {"batch_size": 2, **({"num_tokens": 4} if family_of(d) == "mtp" else {}), "pool_size": 3},
                        generators={"g_raw": {"kind": "randn", "mean": -8.0}})
    x = inputs_of(d, w)
    out = run_reference(d, x)
    check_against_bf16_truth(d, x, out)
    slots = x["state_indices"].long()
    kept = (out["new_state_pool"][slots] == x["state_pool"][slots]).double().mean().item()
    assert 0.0 < kept < 1.0, f"{d.name}: {kept:.3f} of the stored elements kept their bits (expected some, not all)"


# Plausible bugs planted in a copy of the reference: each must fail the check above.
MUTANTS = {
    "truncated at the store": ("new_state_pool[slots] = P.to(state_pool.dtype)",
                               "new_state_pool[slots] = (P.contiguous().view(torch.int32) & -65536)"
                               ".view(torch.float32).to(state_pool.dtype)"),
    "stored without the last update": ("new_state_pool[slots] = P.to(state_pool.dtype)",
                                       "new_state_pool[slots] = state_pool[slots]"),
    "padding row writes slot -1 (the last)": ("new_state_pool[slots] = P.to(state_pool.dtype)",
                                              "new_state_pool[slots] = P.to(state_pool.dtype)\n"
                                              "    new_state_pool[PAD_SLOT_ID] = P[0].to(state_pool.dtype)"),
}
MTP_MUTANTS = {
    "bf16 between tokens": ("        o[:R, t] = (P @ qs[:, t, :, :, None])[..., 0]",
                            "        P = P.to(state_pool.dtype).float()\n"
                            "        o[:R, t] = (P @ qs[:, t, :, :, None])[..., 0]"),
}


def mutant_params():
    out = []
    for p in bf16_definitions():
        d = p.values[0]
        if p.marks:  # the fast tier's definitions only
            continue
        for bug, edit in {**MUTANTS, **(MTP_MUTANTS if family_of(d) == "mtp" else {})}.items():
            out.append(pytest.param(d, bug, edit, id=f"{d.name}-{bug.replace(' ', '_')}"))
    return out


@pytest.mark.parametrize("d,bug,edit", mutant_params())
def test_planted_bugs_are_caught(d, bug, edit):
    old, new = edit
    assert d.reference.count(old) == 1, f"{d.name}: the text to mutate is no longer in the reference: {old!r}"
    m = d.model_copy(update={"name": d.name + "_mutant", "reference": d.reference.replace(old, new)})
    x = inputs_of(d, small_workload(d, num_tokens=4))
    with pytest.raises(AssertionError):
        check_against_bf16_truth(d, x, run_reference(m, x))
