"""FlashInfer as a second ground truth (gpu tier): every decode, mtp and prefill definition's reference
against flashinfer.recurrent_kda, through the `flashinfer` solution's adapters, wherever FlashInfer runs
the definition on this device; and the two ground truths, fla and FlashInfer, against each other.

FlashInfer's decode kernel keeps states in bfloat16 (docs/flashinfer_kda.md), so its outputs are judged
with the definition's own tolerances (the ones every solution meets), not the float32 bound. A
definition FlashInfer does not run here is skipped with the solution's reason (e.g. prefill needs compute
capability 10.0, 10.3 or 12.0)."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_close, custom_workload, family_params, inputs_of, require_cuda, run_reference

from kda_trace.solutions import flashinfer_adapters as fa

pytestmark = pytest.mark.gpu
FAMILIES = ("decode", "mtp", "prefill")


def workloads(d):
    """Small shapes of ours for each family: several requests, a pool larger than the batch, ragged sequences."""
    stage = d.tag("stage")
    if stage == "decode":
        return [custom_workload(d, {"batch_size": 5, "pool_size": 11}), custom_workload(d, {"batch_size": 64, "pool_size": 96})]
    if stage == "mtp":
        return [custom_workload(d, {"batch_size": 3, "num_tokens": n, "pool_size": 8}) for n in (1, 2, 4)]
    lens = [1, 17, 64, 130]
    return [custom_workload(d, {"total_seq_len": sum(lens), "num_seqs": 4, "len_cu_seqlens": 5}, seq_lens=lens),
            custom_workload(d, {"total_seq_len": 300, "num_seqs": 1, "len_cu_seqlens": 2}, seq_lens=[300],
                            absent=("initial_state",))]


def flashinfer_run(d):
    """The flashinfer solution's run() for `d` on cuda, or a skip with the reason it does not run here."""
    require_cuda("FlashInfer's KDA kernels")
    sol = fa.FlashInferSolution("cuda")
    reason = sol.supports(d)
    if reason is not None:
        pytest.skip(f"flashinfer: {reason}")
    return sol.build(d, "cuda")


def outputs(d, result):
    return dict(zip(d.outputs, result if isinstance(result, tuple) else (result,)))


@pytest.mark.parametrize("d", [p for f in FAMILIES for p in family_params(f)])
def test_reference_matches_flashinfer(d):
    run = flashinfer_run(d)
    for w in workloads(d):
        x = inputs_of(d, w, "cuda")
        ref = run_reference(d, {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in x.items()})
        got = outputs(d, run(**{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in x.items()}))
        for name in d.outputs:
            assert_close(d, name, ref[name].float(), got[name].float(), "definition",
                         f"flashinfer vs reference ({w.axes})", x.get("cu_seqlens"))


@pytest.mark.parametrize("d", [p for f in FAMILIES for p in family_params(f, fast="one")])
def test_fla_matches_flashinfer(d):
    """The two engines' kernels on the same inputs, judged with the definition's tolerances."""
    pytest.importorskip("fla.ops.kda")
    from kda_trace.solutions.fla_adapters import FlaSolution

    run = flashinfer_run(d)
    fla = FlaSolution("cuda")
    if fla.supports(d) is not None:
        pytest.skip(f"fla: {fla.supports(d)}")
    fla_run = fla.build(d, "cuda")
    for w in workloads(d):
        x = inputs_of(d, w, "cuda")
        a = outputs(d, fla_run(**{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in x.items()}))
        b = outputs(d, run(**{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in x.items()}))
        for name in d.outputs:
            assert_close(d, name, a[name].float(), b[name].float(), "definition", f"flashinfer vs fla ({w.axes})",
                         x.get("cu_seqlens"))
