"""mtp family (a few tokens per request against a K-last state pool, in-op gate, beta logits, in-op L2
norm): every definition's reference against ground truth (untouched pool slots bit-identical), request
independence, and prefix / continuation through the pool."""

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

FAMILY = "mtp"
TOKEN_INPUTS = ("q", "k", "v", "g_raw", "b")


def pool(d, batch_size, num_tokens, pool_size):
    return custom_workload(d, {"batch_size": batch_size, "num_tokens": num_tokens, "pool_size": pool_size})


@covers("mtp", batch=("pool",), direction=("forward",), gate=("safe", "unbounded"), beta=("logits",),
        qk_norm=("l2",), initial_state=("given",), final_state=("returned",), gva=("on", "off"),
        kv_dims=("equal", "differ"), state_layout=("kv", "vk"))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="cells"))
def test_matches_ground_truth(d):
    """Two requests of three tokens in a pool of five slots; 2-token chunks in the chunked truth."""
    check_against_truth(d, pool(d, 2, 3, 5), chunk=2)


@covers("mtp", batch=("pool",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_requests_are_independent(d):
    """Permuting the requests (with their slots) permutes o and leaves the same new pool."""
    x = upcast(inputs_of(d, pool(d, 3, 2, 6)))
    to_problem(d, x)
    ref = run_reference(d, x)
    order = [2, 0, 1]
    y = {k: (v[order] if k in TOKEN_INPUTS + ("state_indices",) else v) for k, v in x.items()}
    got = run_reference(d, y)
    assert_close(d, "o", ref["o"][order], got["o"], "fp32", "permuted requests vs the original run")
    assert_close(d, "new_state_pool", ref["new_state_pool"], got["new_state_pool"], "fp32", "permuted requests")


@covers("mtp", batch=("pool",), initial_state=("given",), final_state=("returned",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_prefix_and_continuation(d):
    """The first tokens of every request give the first outputs; running the remaining tokens against
    the pool the prefix returned gives the remaining outputs and the same final pool."""
    x = upcast(inputs_of(d, pool(d, 2, 4, 5)))
    to_problem(d, x)
    full = run_reference(d, x)
    cut = 1

    def part(sl, state_pool):
        return {k: (v[:, sl] if k in TOKEN_INPUTS else v) for k, v in x.items()} | {"state_pool": state_pool}

    head = run_reference(d, part(slice(0, cut), x["state_pool"]))
    assert_close(d, "o", full["o"][:, :cut], head["o"], "fp32", "prefix vs full run")
    tail = run_reference(d, part(slice(cut, None), head["new_state_pool"]))
    assert_close(d, "o", full["o"][:, cut:], tail["o"], "fp32", "continuation through the pool vs full run")
    assert_close(d, "new_state_pool", full["new_state_pool"], tail["new_state_pool"], "fp32",
                 "continuation vs full run")


@covers("mtp", batch=("pool",), gate=("safe", "unbounded"))
@pytest.mark.parametrize("d,w", workload_params(FAMILY))
def test_dataset_workloads(d, w):
    """Every (non-stress) dataset workload against the chunked truth (untouched slots checked too)."""
    check_against_truth(d, w, device=DEVICE, with_fla_naive=False)


@pytest.mark.gpu
@covers("mtp", batch=("pool",), gate=("safe", "unbounded"), beta=("logits",), qk_norm=("l2",),
        state_layout=("vk",))
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_fla_triton(d):
    """fla's fused_recurrent_kda (gate, beta sigmoid, L2 norm, V-first state inside the kernel) on the
    gathered states, against the reference, bf16 inputs on the GPU."""
    require_cuda()
    check_against_fla(d, pool(d, 32, 6, 100), "recurrent", "cuda")
