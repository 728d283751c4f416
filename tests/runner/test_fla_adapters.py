"""The fla adapters' mapping of each family's inputs and tags onto fla.ops.kda, checked on the CPU.

fla's chunk_kda needs a GPU driver, so for the chunk families `chunk_kda` is replaced by a shim onto
`fused_recurrent_kda` (same math, same flags, runs under TRITON_INTERPRET=1): what is checked is the
adapter (shapes, flags, gate, beta, layout, cu_seqlens), not fla's chunk kernel.
"""

import os

import pytest

os.environ["TRITON_INTERPRET"] = "1"

from kda_trace.compare import compare_output, tolerance_for  # noqa: E402
from kda_trace.dataset import load_dataset  # noqa: E402
from kda_trace.inputs import clone_inputs, make_inputs  # noqa: E402
from kda_trace.reference import compile_reference  # noqa: E402
from kda_trace.runner import normalize_outputs  # noqa: E402

fla_kda = pytest.importorskip("fla.ops.kda")


def _chunk_via_recurrent(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                         safe_gate=False, **kw):
    kw.pop("chunk_size", None)
    return fla_kda.fused_recurrent_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                       output_final_state=output_final_state, **kw)


@pytest.fixture(scope="module")
def ds():
    return load_dataset()


def check(ds, name, monkeypatch, device_claim):
    from kda_trace.solutions.fla_adapters import FlaSolution

    if name not in ds.definitions:
        pytest.skip(f"{name} is not in the dataset")
    d = ds.definitions[name]
    w = min((w for w in ds.workloads_of(name) if "smoke" in w.tags), key=lambda w: sum(w.axes.values()))
    monkeypatch.setattr(fla_kda, "chunk_kda", _chunk_via_recurrent)
    sol = FlaSolution(device_claim)
    assert sol.supports(d) is None
    run = sol.build(d, "cpu")
    inputs = make_inputs(d, w, device="cpu")
    ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name)(**clone_inputs(inputs)))
    out, why = normalize_outputs(d, run(**clone_inputs(inputs)))
    assert out is not None, why
    cu = inputs.get("cu_seqlens")
    for o in d.outputs:
        m = compare_output(d, o, ref[o], out[o], tolerance_for(d, o), cu)
        assert m.passed, f"{name} {o}: {m.reason}"


@pytest.mark.parametrize("name", [
    "kda_prefill_h8_d128_k_last",
    pytest.param("kda_prefill_h16_d128_k_last_safe_gate", marks=pytest.mark.slow),  # ~10 s interpreted
    pytest.param("kda_fwd_qk16_v32_d128_v_last", marks=pytest.mark.slow),  # ~20 s interpreted
])
def test_chunk_family_mapping(ds, name, monkeypatch):
    check(ds, name, monkeypatch, device_claim="cuda")  # claim a GPU so that supports() accepts chunk families


def test_chunk_families_unsupported_on_cpu(ds):
    from kda_trace.solutions.fla_adapters import FlaSolution

    reason = FlaSolution("cpu").supports(ds.definitions["kda_prefill_h8_d128_k_last"])
    assert reason and "GPU" in reason


def test_spec_verify_calls_fla_state_indices_path(ds, monkeypatch):
    """spec_verify on fla's real fused_recurrent_kda_fwd (2-D ssm_state_indices, num_accepted_tokens, a padding
    row as a zero-token sequence), interpreted on the CPU, against the reference; pool slots checked as the
    runner does (written slots by tolerance, the others bit-identical)."""
    import torch

    from kda_trace.compare import inplace_violations
    from kda_trace.solutions.fla_adapters import FlaSolution

    name = "kda_spec_verify_h8_d128_k_last"
    d = ds.definitions[name]
    w = next(w for w in ds.workloads_of(name) if "smoke" in w.tags and "pad_rows" in str(w.inputs["state_indices"]))
    sol = FlaSolution("cpu")
    assert sol.supports(d) is None
    inputs = make_inputs(d, w, device="cpu")
    assert bool((inputs["state_indices"][-1] == -1).all()) and bool((inputs["state_indices"][:-1] >= 0).all())
    ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name)(**clone_inputs(inputs)))
    mine = clone_inputs(inputs)
    out, why = normalize_outputs(d, sol.build(d, "cpu")(**mine))
    assert out is not None, why
    assert out["new_state_pool"].data_ptr() == mine["state_pool"].data_ptr()  # fla wrote the pool in place
    for o in d.outputs:
        m = compare_output(d, o, ref[o], out[o], tolerance_for(d, o))
        assert m.passed, f"{name} {o}: {m.reason}"
    assert inplace_violations(inputs["state_pool"], ref["new_state_pool"], out["new_state_pool"]) == 0
    assert torch.equal(out["o"][-1], torch.zeros_like(out["o"][-1]))


@pytest.mark.parametrize("name", ["kda_decode_h12_d128_k_last_safe_gate_bf16_state",
                                  "kda_mtp_h12_d128_k_last_safe_gate_bf16_state"])
def test_bf16_pool_calls_fla_in_place_with_padding(ds, name):
    """A bf16 pool with a padding row: fla's fused_recurrent_kda_fwd, interpreted, writes the real rows' slots in
    place and nothing else (the -1 row is a zero-token sequence), o zero on the padding row. The interpreter
    stores bf16 by truncation, so the stored states are checked to one bf16 ulp (2^-7 relative), not with the
    definition's tolerance (which a truncating store fails: tests/test_dataset_kda.py)."""
    import torch

    from kda_trace.compare import inplace_violations
    from kda_trace.solutions.fla_adapters import FlaSolution

    d = ds.definitions[name]
    w = next(w for w in ds.workloads_of(name) if "smoke" in w.tags)
    sol = FlaSolution("cpu")
    assert sol.supports(d) is None
    inputs = make_inputs(d, w, device="cpu")
    assert int((inputs["state_indices"] < 0).sum()) == 1
    ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name)(**clone_inputs(inputs)))
    mine = clone_inputs(inputs)
    out, why = normalize_outputs(d, sol.build(d, "cpu")(**mine))
    assert out is not None, why
    assert out["new_state_pool"] is mine["state_pool"] and out["new_state_pool"].dtype == torch.bfloat16
    m = compare_output(d, "o", ref["o"], out["o"], tolerance_for(d, "o"))
    assert m.passed, m.reason
    assert torch.equal(out["o"][-1], torch.zeros_like(out["o"][-1]))
    assert inplace_violations(inputs["state_pool"], ref["new_state_pool"], out["new_state_pool"]) == 0
    err = (out["new_state_pool"].double() - ref["new_state_pool"].double()).abs()
    assert bool((err <= 2.0 ** -7 * ref["new_state_pool"].double().abs() + 1e-6).all())
