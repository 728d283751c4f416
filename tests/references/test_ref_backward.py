"""backward family (gradients of the forward family): the reference's gradients against autograd
through fla's naive recurrence in float64 and through our chunked form in float64, and against fla's
Triton chunk_kda backward on a GPU."""

from __future__ import annotations

import ground_truth as gt
import pytest
import torch
from conftest import (
    DEVICE,
    assert_bits_equal,
    assert_close,
    check_output_specs,
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

FAMILY = "backward"
GRAD_OF = {"dq": "q", "dk": "k", "dv": "v", "dg": "g", "dbeta": "beta", "dh0": "initial_state"}


def autograd_truth(d, x, solver) -> dict:
    """Gradients of sum(o * do) + sum(final_state * dht) by autograd through a float64 solver."""
    p = to_problem(d, x)
    leaves = {name: getattr(p, attr).detach().requires_grad_() for name, attr in
              (("q", "q"), ("k", "k"), ("v", "v"), ("g", "g"), ("beta", "beta"), ("initial_state", "h0"))}
    p = gt.Problem(q=leaves["q"], k=leaves["k"], v=leaves["v"], g=leaves["g"], beta=leaves["beta"],
                   scale=p.scale, h0=leaves["initial_state"])
    o, ht = solver(p)
    loss = (o * x["do"].to(o)).sum() + (ht * x["dht"].to(ht)).sum()
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return {out: g for out, g in zip(GRAD_OF, grads)}


def check_backward(d, w, device="cpu", solvers=None):
    """Reference gradients (bf16 and float32 runs, as in conftest.check_against_truth) against autograd."""
    x = inputs_of(d, w, device)
    out = run_reference(d, x)
    check_output_specs(d, w, out)
    x32 = upcast(x)
    out32 = run_reference(d, x32)
    for name, t in out.items():
        assert_bits_equal(t, out32[name].to(t.dtype), f"{d.name} {name}: bf16-input run vs float32-input run cast")
    solvers = solvers or {"fla naive_recurrent_kda float64 autograd": gt.fla_recurrent,
                          "chunked float64 autograd": lambda p: gt.chunked(p, chunk=2)}
    for what, solver in solvers.items():
        truth = autograd_truth(d, x32, solver)
        for name in d.outputs:
            assert_close(d, name, truth[name], out32[name], "fp32_grad", f"float32 reference vs {what}")
        for name, t in out.items():
            if t.dtype in (torch.bfloat16, torch.float16):
                assert_close(d, name, truth[name], t, "bf16_cast", f"bf16 reference vs {what}")


@covers("backward", batch=("dense",), direction=("backward",), gate=("precomputed",), beta=("prob",),
        qk_norm=("none",), initial_state=("given",), final_state=("returned",), gva=("on", "off"),
        kv_dims=("equal", "differ"), state_layout=("kv",))
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_matches_autograd(d):
    """Two rows of four tokens: every gradient against autograd through two float64 formulations."""
    check_backward(d, custom_workload(d, {"batch_size": 2, "seq_len": 4}))


@covers("backward", batch=("dense",), direction=("backward",))
@pytest.mark.parametrize("d,w", workload_params(FAMILY, max_tokens=2048))
def test_dataset_workloads(d, w):
    """Dataset workloads up to 2048 tokens (autograd memory) against autograd through the chunked form."""
    check_backward(d, w, device=DEVICE, solvers={"chunked float64 autograd": lambda p: gt.chunked(p, chunk=16)})


@pytest.mark.gpu
@covers("backward", batch=("dense",), direction=("backward",), initial_state=("given",))
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_fla_triton(d):
    """fla's chunk_kda backward (autograd through its Triton kernels) on bf16 inputs against the reference."""
    require_cuda()
    from fla.ops.kda import chunk_kda

    x = inputs_of(d, custom_workload(d, {"batch_size": 2, "seq_len": 1000}), device="cuda")
    to_problem(d, x)
    ref = run_reference(d, x)
    leaves = {name: x[name].detach().clone().requires_grad_() for name in GRAD_OF.values()}
    o, ht = chunk_kda(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"], scale=float(x["scale"]),
                      initial_state=leaves["initial_state"], output_final_state=True)
    torch.autograd.backward((o, ht), (x["do"], x["dht"]))
    for out, name in GRAD_OF.items():
        assert_close(d, out, ref[out].float(), leaves[name].grad.float(), "definition",
                     "fla chunk_kda backward (bf16) vs reference")
