"""gate family (raw gate -> log decay): every definition's reference against our float64 gate and fla's
naive gates, on the dataset's workloads and on hypothesis-drawn extreme inputs; fla's fused Triton gate
on a GPU."""

from __future__ import annotations

import ground_truth as gt
import pytest
import torch
from conftest import (
    DEVICE,
    assert_close,
    check_output_specs,
    custom_workload,
    dataset,
    family_params,
    grid_mark,
    inputs_of,
    require_cuda,
    run_reference,
    workload_size,
)
from coverage_cells import covers, observe
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FAMILY = "gate"
UNDERFLOW = 1e-30  # far below float32's resolution of exp(g) = 1 + g (6e-8), far above its denormals
FAST_SIZE = 64 * 128  # tokens x heads up to which a dataset workload runs in the fast tier (the others: slow)


def lower_bound(d):
    lb = d.tag("lower_bound")
    assert (d.tag("gate") == "safe") == (lb is not None), f"{d.name}: gate:{d.tag('gate')} with lower_bound:{lb}"
    return None if lb is None else float(lb)


def flush_denormals(t):
    return torch.where(t.abs() < UNDERFLOW, torch.zeros_like(t), t)


def check_gate(d, x, out, what):
    """The reference's g against our float64 gate and fla's naive gate, both with TOLERANCES['fp32']."""
    observe(d.name, gate=d.tag("gate"))
    lb = lower_bound(d)
    for name, truth in (("float64 gate", gt.gate(x["g_raw"], x["A_log"], x["dt_bias"], lb)),
                        ("fla naive gate", gt.fla_gate(x["g_raw"], x["A_log"], x["dt_bias"], lb))):
        # float32's exp and sigmoid underflow past arguments of about -87 (denormals, then 0): a safe gate
        # at g_raw = -100 is ~1e-40 in float64 and 0 or a few-bit denormal in float32. Values below
        # UNDERFLOW (on either side) count as 0; a log decay that small is exactly no decay in float32.
        truth, got = flush_denormals(truth), flush_denormals(out["g"].to(truth))
        assert_close(d, "g", truth, got, "fp32", f"{what}: reference vs {name}")
    if lb is not None:
        assert bool((out["g"] >= lb).all() and (out["g"] <= 0).all()), f"{d.name}: safe gate outside [{lb}, 0]"
    else:
        assert bool((out["g"] <= 0).all()), f"{d.name}: log decay above 0"


def gate_workloads(fast: bool):
    """The fast tier's small dataset workloads, or the others (slow, large or stress: conftest.grid_mark)."""
    out = []
    for d in [p.values[0] for p in family_params(FAMILY)]:
        if d is None:
            continue
        for i, w in enumerate(dataset().workloads_of(d.name)):
            if (workload_size(d, w) <= FAST_SIZE) != fast:
                continue
            # the gate is elementwise: on the CPU a workload of 24576 tokens x heads takes 3 s
            marks = () if fast else grid_mark(d, w, max_tokens=2 ** 62, cpu_max_size=64 * 1024)
            out.append(pytest.param(d, w, id=f"{d.name}-{i}", marks=marks))
    return out


@covers("gate", gate=("safe", "unbounded"))
@pytest.mark.parametrize("d,w", gate_workloads(fast=True))
def test_dataset_workloads(d, w):
    """The dataset's small workloads (smoke and edge: strongly positive and negative raw gates)."""
    x = inputs_of(d, w)
    out = run_reference(d, x)
    check_output_specs(d, w, out)
    check_gate(d, x, out, f"workload {w.uuid}")


@covers("gate", gate=("safe", "unbounded"))
@pytest.mark.parametrize("d,w", gate_workloads(fast=False))
def test_dataset_workloads_large(d, w):
    """The dataset's large gate workloads."""
    x = inputs_of(d, w, DEVICE)
    out = run_reference(d, x)
    check_output_specs(d, w, out)
    check_gate(d, x, out, f"workload {w.uuid}")


@covers("gate", gate=("safe", "unbounded"))
@pytest.mark.parametrize("d", family_params(FAMILY))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), loc=st.sampled_from([-100.0, -30.0, -5.0, 0.0, 5.0, 19.9, 20.1, 30.0, 100.0]),
       spread=st.sampled_from([0.01, 1.0, 10.0]))
def test_extreme_raw_gates(d, seed, loc, spread):
    """Raw gates around the softplus threshold (20), deep in saturation, and far negative (exp underflow
    in float32 must stay an absolute error below atol), with random A_log and dt_bias."""
    w = custom_workload(d, {"num_tokens": 2})
    x = inputs_of(d, w, seed=seed)
    x["g_raw"] = (x["g_raw"].float() * spread + loc).to(x["g_raw"].dtype)
    check_gate(d, x, run_reference(d, x), f"g_raw ~ {loc} + {spread} * randn")


@pytest.mark.gpu
@covers("gate", gate=("safe", "unbounded"))
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_fla_triton(d):
    """fla's fused Triton gate against the reference."""
    require_cuda()
    from fla.ops.kda.gate import fused_kda_gate

    x = inputs_of(d, custom_workload(d, {"num_tokens": 4096}), device="cuda")
    observe(d.name, gate=d.tag("gate"))
    ref = run_reference(d, x)
    got = fused_kda_gate(x["g_raw"], x["A_log"], x["dt_bias"].reshape(-1), lower_bound=lower_bound(d))
    assert_close(d, "g", ref["g"], got.float(), "fp32", "fla fused_kda_gate vs reference")
