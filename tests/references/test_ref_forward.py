"""forward family (fla chunk_kda defaults: dense batch, precomputed g, beta a probability, unit-norm q/k
from the caller, [K, V] state): every definition's reference against ground truth, and the structure
of a dense batch. The family holds the GVA (qk16_v32) and K != V (dk128_dv256) definitions."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    DEVICE,
    assert_close,
    check_against_fla,
    check_against_truth,
    custom_workload,
    family_params,
    inputs_of,
    require_cuda,
    run_reference,
    to_problem,
    upcast,
    workload_params,
)
from coverage_cells import covers

FAMILY = "forward"
TOKEN_INPUTS = ("q", "k", "v", "g", "beta")


def dense(d, batch_size, seq_len, absent=()):
    return custom_workload(d, {"batch_size": batch_size, "seq_len": seq_len}, absent=absent)


@covers("forward", batch=("dense",), direction=("forward",), gate=("precomputed",), beta=("prob",),
        qk_norm=("none",), initial_state=("given", "absent"), final_state=("returned",), gva=("on", "off"),
        kv_dims=("equal", "differ"), state_layout=("kv", "vk"))
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_matches_ground_truth(d):
    """Two rows from given initial states, then one row from zeros; 2-token chunks in the chunked truth."""
    check_against_truth(d, dense(d, 2, 5), chunk=2)
    check_against_truth(d, dense(d, 1, 3, absent=("initial_state",)), chunk=2, with_fla_naive=False)


@covers("forward", batch=("dense",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_rows_are_independent(d):
    """Permuting the batch rows permutes the results; changing one row changes no other row."""
    x = upcast(inputs_of(d, dense(d, 3, 4)))
    to_problem(d, x)
    ref = run_reference(d, x)
    order = [2, 0, 1]
    y = {k: (v[order] if k in TOKEN_INPUTS + ("initial_state",) else v) for k, v in x.items()}
    got = run_reference(d, y)
    assert_close(d, "o", ref["o"][order], got["o"], "fp32", "permuted rows vs the original run")
    assert_close(d, "final_state", ref["final_state"][order], got["final_state"], "fp32", "permuted rows")

    y = dict(x)
    y["v"] = x["v"].clone()
    y["v"][0] = torch.randn_like(y["v"][0])
    changed = run_reference(d, y)
    assert not torch.equal(changed["o"][0], ref["o"][0]), "row 0 must change"
    torch.testing.assert_close(changed["o"][1:], ref["o"][1:], rtol=0, atol=0)
    torch.testing.assert_close(changed["final_state"][1:], ref["final_state"][1:], rtol=0, atol=0)


@covers("forward", batch=("dense",), initial_state=("given",), final_state=("returned",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_prefix_and_continuation(d):
    """The first t tokens give the first t outputs; continuing from their final state with the rest
    gives the remaining outputs and the same final state."""
    x = upcast(inputs_of(d, dense(d, 2, 7)))
    to_problem(d, x)
    full = run_reference(d, x)
    cut = 3

    def part(sl, h0):
        return {k: (v[:, sl] if k in TOKEN_INPUTS else v) for k, v in x.items()} | {"initial_state": h0}

    head = run_reference(d, part(slice(0, cut), x["initial_state"]))
    assert_close(d, "o", full["o"][:, :cut], head["o"], "fp32", "prefix vs full run")
    tail = run_reference(d, part(slice(cut, None), head["final_state"]))
    assert_close(d, "o", full["o"][:, cut:], tail["o"], "fp32", "continuation from the prefix's final state")
    assert_close(d, "final_state", full["final_state"], tail["final_state"], "fp32", "continuation vs full run")


@covers("forward", batch=("dense",), gva=("on", "off"), kv_dims=("equal", "differ"))
@pytest.mark.parametrize("d,w", workload_params(FAMILY))
def test_dataset_workloads(d, w):
    """Every (non-stress) dataset workload against the chunked truth."""
    check_against_truth(d, w, device=DEVICE, with_fla_naive=False)


@pytest.mark.gpu
@covers("forward", batch=("dense",), gate=("precomputed",), state_layout=("kv",), gva=("on", "off"),
        kv_dims=("equal", "differ"), initial_state=("given",))
@pytest.mark.parametrize("kernel", ["chunk", "recurrent"])
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_fla_triton(d, kernel):
    """fla's Triton chunk_kda / fused_recurrent_kda against the reference, bf16 inputs on the GPU."""
    require_cuda()
    check_against_fla(d, dense(d, 2, 1000), kernel, "cuda")
