"""spec_verify family (vLLM's speculative-decoding verify: 2-D state indices, accepted counts, a state
written after every draft token, padding rows of -1): every definition's reference against ground truth.

The ground truth is built here from the per-row problem: row n starts from
pool[state_indices[n, accepted[n] - 1]], and the state after token t is the final state of the same
problem cut after t + 1 tokens (each prefix run separately through our chunked float64 form and fla's
naive recurrence in float64), written to pool[state_indices[n, t]]. Padding rows: o zero, nothing written.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import (
    DEVICE,
    assert_bits_equal,
    assert_close,
    custom_workload,
    family_params,
    inputs_of,
    reference_runs,
    run_reference,
    to_problem,
    upcast,
    workload_params,
)
from coverage_cells import covers

import ground_truth as gt

FAMILY = "spec_verify"
TOKEN_INPUTS = ("q", "k", "v", "g_raw", "b")


def verify_workload(d, batch_size, num_tokens, pool_size, pad=0, accepted=None):
    gens = {"num_accepted_tokens": {"kind": "uniform", "low": 1.0, "high": num_tokens + 0.5}
            if accepted is None else {"kind": "constant", "value": float(accepted)}}
    if pad:
        gens["state_indices"] = {"kind": "slot_indices", "pool_axis": "pool_size", "pad_rows": pad}
    return custom_workload(d, {"batch_size": batch_size, "num_tokens": num_tokens, "pool_size": pool_size},
                           generators=gens)


def real_rows(x) -> int:
    return int((x["state_indices"][:, 0] >= 0).sum())


def truth(d, x, kind: str) -> dict[str, torch.Tensor]:
    """Float64 ground truth of the definition's outputs (kind: 'chunked' or 'fla')."""
    R, T = real_rows(x), x["q"].shape[1]
    idx = x["state_indices"].long()
    start = idx[:R].gather(1, x["num_accepted_tokens"][:R].long()[:, None] - 1)[:, 0]
    # the real rows as an mtp-style call: row r starts from slot start[r]
    rows = {n: (t[:R] if n in TOKEN_INPUTS else t) for n, t in x.items()} | {"state_indices": start}
    problem = to_problem(d, rows, fla_ops=kind == "fla")
    o = torch.zeros(x["v"].shape, dtype=torch.float64)
    pool = x["state_pool"].to("cpu", torch.float64).clone()
    layout = d.tag("state_layout")
    for t in range(T):
        cut = replace(problem, q=problem.q[:, :t + 1], k=problem.k[:, :t + 1], v=problem.v[:, :t + 1],
                      g=problem.g[:, :t + 1], beta=problem.beta[:, :t + 1])
        o_t, ht = gt.chunked(cut, chunk=2) if kind == "chunked" else gt.fla_recurrent(cut)
        if t == T - 1:
            o[:R] = o_t.cpu()
        pool[idx[:R, t].cpu()] = gt.state_from_kv(ht, layout).cpu()
    return {"o": o, "new_state_pool": pool}


def check_against_truth(d, w, device="cpu", with_fla_naive=True):
    x, out, x32, out32 = reference_runs(d, w, device)
    kinds = ["chunked"] + (["fla"] if with_fla_naive else [])
    for kind in kinds:
        want = truth(d, x32, kind)
        for name in d.outputs:
            assert_close(d, name, want[name], out32[name].cpu(), "fp32", f"float32 reference vs {kind} float64")
    # padding rows: o exactly zero; slots no real row names: bit-identical
    R = real_rows(x)
    assert bool((out["o"][R:] == 0).all()), f"{d.name}: o of padding rows is not zero"
    touched = torch.zeros(x["state_pool"].shape[0], dtype=torch.bool, device=x["state_pool"].device)
    touched[x["state_indices"][:R].long().flatten()] = True
    if not bool(touched.all()):
        assert_bits_equal(out["new_state_pool"][~touched], x["state_pool"][~touched], f"{d.name}: untouched slots")
    return x, out32


@covers("spec_verify", batch=("pool",), direction=("forward",), gate=("safe", "unbounded"), beta=("logits",),
        qk_norm=("l2",), initial_state=("given",), final_state=("returned",), gva=("off",),
        kv_dims=("equal",), state_layout=("vk",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="cells"))
def test_matches_ground_truth(d):
    """Three requests of three draft positions (random accepted counts) and two padding rows, pool of 12."""
    x, out = check_against_truth(d, verify_workload(d, 5, 3, 12, pad=2))
    assert real_rows(x) == 3 and bool((x["state_indices"][3:] == -1).all())


@covers("spec_verify", batch=("pool",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_start_slot_is_the_last_accepted(d):
    """The same pool and tokens with accepted = 1 and accepted = T start from different slots: o differs,
    and each run equals the run whose pool has the start slot's state copied to the other position."""
    w1 = verify_workload(d, 2, 3, 8, accepted=1)
    x = upcast(inputs_of(d, w1))
    to_problem(d, {**x, "state_indices": x["state_indices"][:, 0]})
    a = run_reference(d, x)
    y = dict(x, num_accepted_tokens=torch.full_like(x["num_accepted_tokens"], 3))
    b = run_reference(d, y)
    assert not torch.equal(a["o"], b["o"]), "the accepted count does not change the start state"
    pool = x["state_pool"].clone()
    idx = x["state_indices"].long()
    pool[idx[:, 0]] = x["state_pool"][idx[:, 2]]  # what accepted = 3 reads, moved to where accepted = 1 reads
    c = run_reference(d, dict(x, state_pool=pool))
    assert_close(d, "o", b["o"], c["o"], "fp32", "accepted = 3 vs accepted = 1 from the moved state")


@covers("spec_verify", batch=("pool",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_bad_indices_are_rejected(d):
    """Padding before a real row, a partly padded row, repeated slots and out-of-range accepted counts fail."""
    x = inputs_of(d, verify_workload(d, 3, 2, 8, pad=1))
    to_problem(d, {**x, "state_indices": x["state_indices"][:2, 0],
                   **{n: x[n][:2] for n in TOKEN_INPUTS}})
    si = x["state_indices"]
    partly, repeated, real_minus_one = si.clone(), si.clone(), si.clone()
    partly[2, 1] = 7
    repeated[1, 0] = si[0, 1]
    real_minus_one[0, 1] = -1
    cases = {
        "padding first": dict(state_indices=si.flip(0)),
        "partly padded row": dict(state_indices=partly),
        "repeated slot": dict(state_indices=repeated),
        "-1 inside a real row": dict(state_indices=real_minus_one),
        "accepted 0": dict(num_accepted_tokens=torch.zeros_like(x["num_accepted_tokens"])),
        "accepted > T": dict(num_accepted_tokens=torch.full_like(x["num_accepted_tokens"], 3)),
    }
    for what, change in cases.items():
        with pytest.raises(ValueError):
            run_reference(d, {**x, **change})
            pytest.fail(f"{what}: accepted")


@covers("spec_verify", batch=("pool",), gate=("safe", "unbounded"))
@pytest.mark.parametrize("d,w", workload_params(FAMILY))
def test_dataset_workloads(d, w):
    """Every (non-stress) dataset workload against the chunked truth (untouched slots checked too)."""
    check_against_truth(d, w, device=DEVICE, with_fla_naive=False)


@pytest.mark.gpu
@covers("spec_verify", batch=("pool",), gate=("safe", "unbounded"), state_layout=("vk",))
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_fla_fused_recurrent_state_indices(d):
    """fla's fused_recurrent_kda_fwd on its 2-D ssm_state_indices path (the runner's fla adapter), bf16 inputs
    on the GPU, against the reference with the definition's tolerances; untouched slots bit-identical."""
    from conftest import require_cuda

    from kda_trace.solutions.fla_adapters import FlaSolution

    require_cuda()
    x = inputs_of(d, verify_workload(d, 40, 6, 400, pad=7), "cuda")
    R = real_rows(x)
    to_problem(d, {**x, "state_indices": x["state_indices"][:R, 0], **{n: x[n][:R] for n in TOKEN_INPUTS}})
    ref = run_reference(d, x)
    pool = x["state_pool"].clone()
    o, new_pool = FlaSolution("cuda").build(d, "cuda")(**{**x, "state_pool": pool})
    assert_close(d, "o", ref["o"].float(), o.float(), "definition", "fla vs reference")
    assert_close(d, "new_state_pool", ref["new_state_pool"], new_pool, "definition", "fla vs reference")
    from kda_trace.compare import inplace_violations

    assert inplace_violations(x["state_pool"], ref["new_state_pool"], new_pool) == 0
