"""decode family (one token per request against a K-last state pool, in-op gate, beta logits, in-op L2
norm): every definition's reference against ground truth (untouched pool slots bit-identical), and the
independence of the requests of a batch."""

from __future__ import annotations

import pytest
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

FAMILY = "decode"
REQUEST_INPUTS = ("q", "k", "v", "g_raw", "b", "state_indices")


def pool(d, batch_size, pool_size):
    return custom_workload(d, {"batch_size": batch_size, "pool_size": pool_size})


@covers("decode", batch=("pool",), direction=("forward",), gate=("safe", "unbounded"), beta=("logits",),
        qk_norm=("l2",), initial_state=("given",), final_state=("returned",), gva=("on", "off"),
        kv_dims=("equal", "differ"), state_layout=("kv", "vk"))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="cells"))
def test_matches_ground_truth(d):
    """Three requests in a pool of seven slots: o and the new pool against the truth; the four
    untouched slots bit-identical to the input pool."""
    check_against_truth(d, pool(d, 3, 7))


@covers("decode", batch=("pool",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_requests_are_independent(d):
    """Permuting the requests (with their slots) permutes o and leaves the same new pool."""
    x = upcast(inputs_of(d, pool(d, 3, 6)))
    to_problem(d, x)
    ref = run_reference(d, x)
    order = [1, 2, 0]
    y = {k: (v[order] if k in REQUEST_INPUTS else v) for k, v in x.items()}
    got = run_reference(d, y)
    assert_close(d, "o", ref["o"][order], got["o"], "fp32", "permuted requests vs the original run")
    assert_close(d, "new_state_pool", ref["new_state_pool"], got["new_state_pool"], "fp32", "permuted requests")


@covers("decode", batch=("pool",), gate=("safe", "unbounded"))
@pytest.mark.parametrize("d,w", workload_params(FAMILY))
def test_dataset_workloads(d, w):
    """Every (non-stress) dataset workload against the chunked truth (untouched slots checked too)."""
    check_against_truth(d, w, device=DEVICE, with_fla_naive=False)


@pytest.mark.gpu
@covers("decode", batch=("pool",), gate=("safe", "unbounded"), beta=("logits",), qk_norm=("l2",),
        state_layout=("vk",))
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_fla_triton(d):
    """fla's fused_recurrent_kda (gate, beta sigmoid, L2 norm and V-first state inside the kernel) on
    the gathered states, against the reference, bf16 inputs on the GPU."""
    require_cuda()
    check_against_fla(d, pool(d, 64, 160), "recurrent", "cuda")
