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
    from_truth,
    inputs_of,
    require_cuda,
    run_reference,
    tags,
    to_problem,
    upcast,
    workload_params,
)
from coverage_cells import covers

FAMILY = "backward"
GRAD_OF = {"dq": "q", "dk": "k", "dv": "v", "dg": "g", "dbeta": "beta", "dh0": "initial_state"}


def grad_of(d) -> dict:
    """Output name -> the input it is the gradient of: d<input>, and dh0 for initial_state."""
    out = {name: ("initial_state" if name == "dh0" else name[1:]) for name in d.outputs}
    assert all(x in d.inputs for x in out.values()), (d.name, out)
    return out


def autograd_truth(d, x, solver) -> dict:
    """Gradients of sum(o * do) + sum(final_state * dht) by autograd through a float64 solver, with respect
    to the definition's raw inputs: the gate, beta sigmoid and q/k norm (to_problem, float64 ground truth)
    and the packing (cu_seqlens) are part of what autograd differentiates."""
    of = grad_of(d)
    leaves = {name: x[name].detach().to(torch.float64).requires_grad_() for name in of.values()}
    p = to_problem(d, {**x, **leaves})
    o, ht = solver(p)
    outs = from_truth(d, x, o, ht)
    loss = (outs["o"] * x["do"].to(o)).sum() + (outs["final_state"] * x["dht"].to(ht)).sum()
    grads = torch.autograd.grad(loss, list(leaves.values()))
    by_input = dict(zip(leaves, grads))
    return {out: by_input[name] for out, name in of.items()}


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


def dense(params):
    """The params of dense definitions (batch:dense); the packed ones have their own tests."""
    return [p for p in params if p.values[0] is None or p.values[0].tag("batch") != "varlen"]


def packed(params):
    return [p for p in params if p.values[0] is not None and p.values[0].tag("batch") == "varlen"]


@covers("backward", batch=("dense",), direction=("backward",), gate=("precomputed",), beta=("prob",),
        qk_norm=("none",), initial_state=("given",), final_state=("returned",), gva=("on", "off"),
        kv_dims=("equal", "differ"), state_layout=("kv",))
@pytest.mark.parametrize("d", dense(family_params(FAMILY)))
def test_matches_autograd(d):
    """Two rows of four tokens: every gradient against autograd through two float64 formulations."""
    check_backward(d, custom_workload(d, {"batch_size": 2, "seq_len": 4}))


@covers("backward", batch=("dense",), direction=("backward",))
@pytest.mark.parametrize("d,w", dense(workload_params(FAMILY, max_tokens=2048)))
def test_dataset_workloads(d, w):
    """Dataset workloads up to 2048 tokens (autograd memory) against autograd through the chunked form."""
    check_backward(d, w, device=DEVICE, solvers={"chunked float64 autograd": lambda p: gt.chunked(p, chunk=16)})


@pytest.mark.gpu
@covers("backward", batch=("dense",), direction=("backward",), initial_state=("given",))
@pytest.mark.parametrize("d", dense(family_params(FAMILY)))
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


# ------------------------------------------------------------------------ packed (training) backward
@covers("backward", batch=("varlen",), direction=("backward",), gate=("precomputed", "unbounded", "safe"),
        beta=("prob", "logits"), qk_norm=("none", "l2"), initial_state=("given",), final_state=("returned",),
        gva=("off",), kv_dims=("equal",), state_layout=("kv",))
@pytest.mark.parametrize("d", packed(family_params(FAMILY, fast="one")))
def test_packed_matches_autograd(d):
    """Packed [1, 3, 2] tokens (a one-token sequence first): every gradient, including those of the raw gate
    input, A_log, dt_bias and the beta logits, against float64 autograd through fla's naive recurrence and
    through our chunked form, with the gate / sigmoid / norm of the float64 ground truth."""
    check_backward(d, custom_workload(d, {"total_seq_len": 6, "num_seqs": 3, "len_cu_seqlens": 4}, seq_lens=[1, 3, 2]))


@covers("backward", batch=("varlen",), direction=("backward",))
@pytest.mark.parametrize("d,w", packed(workload_params(FAMILY, max_tokens=2048)))
def test_packed_dataset_workloads(d, w):
    """Packed dataset workloads up to 2048 tokens against autograd through the chunked form."""
    check_backward(d, w, device=DEVICE, solvers={"chunked float64 autograd": lambda p: gt.chunked(p, chunk=16)})


@pytest.mark.gpu
@covers("backward", batch=("varlen",), direction=("backward",), initial_state=("given",))
@pytest.mark.parametrize("d", packed(family_params(FAMILY)))
def test_packed_fla_triton(d):
    """fla's chunk_kda backward with cu_seqlens (and, for the fused definitions, its in-kernel L2 norm, gate
    and beta sigmoid) on bf16 inputs against the reference, judged with the definition's tolerances."""
    require_cuda()
    from fla.ops.kda import chunk_kda

    x = inputs_of(d, custom_workload(d, {"total_seq_len": 1000, "num_seqs": 3, "len_cu_seqlens": 4},
                                     seq_lens=[100, 513, 387]), device="cuda")
    gate, lower_bound, beta_kind, qk_norm, _ = tags(d)
    to_problem(d, x)
    ref = run_reference(d, x)
    of = grad_of(d)
    leaves = {name: x[name].detach().clone().requires_grad_() for name in of.values()}
    kw = {"scale": float(x["scale"]), "initial_state": leaves["initial_state"], "output_final_state": True,
          "cu_seqlens": x["cu_seqlens"]}
    if gate == "precomputed":
        g, beta = leaves["g"], leaves["beta"]
    else:
        g, beta = leaves["g_raw"], leaves["b"]
        kw.update(use_qk_l2norm_in_kernel=qk_norm == "l2", use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                  A_log=leaves["A_log"], dt_bias=leaves["dt_bias"].view(-1))
        if lower_bound is not None:
            kw.update(safe_gate=True, lower_bound=lower_bound)
    o, ht = chunk_kda(leaves["q"][None], leaves["k"][None], leaves["v"][None], g[None], beta[None], **kw)
    torch.autograd.backward((o, ht), (x["do"][None], x["dht"]))
    for out, name in of.items():
        assert_close(d, out, ref[out].float(), leaves[name].grad.float(), "definition",
                     "fla chunk_kda backward (bf16) vs reference")
