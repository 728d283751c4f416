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


FUSED_DECODE = ["kda_fused_decode_h12_d128_k_last_safe_gate", "kda_fused_decode_h12_d128_k_last_safe_gate_bf16_state",
                "kda_fused_decode_h32_d128_k_last"]


def check_fused_decode(ds, name, workload, state_indices=None):
    """The composed fused decode (torch convolution, fla's fused_recurrent_kda_fwd in place, the gated RMSNorm)
    against the definition's reference, as the runner judges it: o and the convolution pool by the definition's
    tolerance, the state pool by it too when float32 (a bf16 pool to one bf16 ulp: the interpreter stores bf16 by
    truncation, see test_bf16_pool_calls_fla_in_place_with_padding), both pools written in place with every slot
    no live row names (the null slot 0 included) bit-identical, padding rows' o zero."""
    import torch

    from kda_trace.compare import inplace_violations
    from kda_trace.solutions.fla_adapters import FlaSolution

    d = ds.definitions[name]
    sol = FlaSolution("cpu")
    assert sol.supports(d) is None
    inputs = make_inputs(d, workload, device="cpu")
    if state_indices is not None:
        inputs["state_indices"] = torch.tensor(state_indices, dtype=inputs["state_indices"].dtype)
    ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name)(**clone_inputs(inputs)))
    mine = clone_inputs(inputs)
    out, why = normalize_outputs(d, sol.build(d, "cpu")(**mine))
    assert out is not None, why
    assert out["new_conv_state"] is mine["conv_state"] and out["new_state_pool"] is mine["state_pool"]
    bf16_pool = mine["state_pool"].dtype == torch.bfloat16
    for o in ("o", "new_conv_state") if bf16_pool else d.outputs:
        m = compare_output(d, o, ref[o], out[o], tolerance_for(d, o))
        assert m.passed, f"{name} {o}: {m.reason}"
    if bf16_pool:
        err = (out["new_state_pool"].double() - ref["new_state_pool"].double()).abs()
        assert bool((err <= 2.0 ** -7 * ref["new_state_pool"].double().abs() + 1e-6).all())
    for pool, new in (("conv_state", "new_conv_state"), ("state_pool", "new_state_pool")):
        assert inplace_violations(inputs[pool], ref[new], out[new]) == 0, pool
    pad = inputs["state_indices"] <= 0
    assert bool(pad.any()) and bool((out["o"][pad] == 0).all())
    return inputs


def _smoke(ds, name):
    if name not in ds.definitions:
        pytest.skip(f"{name} is not in the dataset")
    return min((w for w in ds.workloads_of(name) if "smoke" in w.tags), key=lambda w: sum(w.axes.values()))


@pytest.mark.parametrize("name", FUSED_DECODE)
def test_fused_decode_composed_on_fla(ds, name):
    """Every fused_decode definition on its smoke workload (two requests and a null-slot padding row)."""
    inputs = check_fused_decode(ds, name, _smoke(ds, name))
    assert 0 in inputs["state_indices"].tolist()


def test_fused_decode_padding_rows_anywhere(ds):
    """Padding rows with slot 0 and slot -1 before and between live rows: the adapter puts the live rows first
    for fla (zero-token sequences after them) and the outputs back in batch order."""
    name = FUSED_DECODE[0]
    w = _smoke(ds, name)
    w = w.model_copy(update={"axes": {"batch_size": 5, "pool_size": 8}})
    check_fused_decode(ds, name, w, state_indices=[0, 5, -1, 2, 7])


def test_fused_decode_with_fla_norm_kernel(ds, monkeypatch):
    """The GPU path's norm, fla's rms_norm_gated (sigmoid gate), interpreted with its autotuner pinned to one
    config (so that nothing is benchmarked): the same outputs as the reference."""
    from fla.modules.norm import fused_norm_gate

    from kda_trace.solutions import fla_adapters

    tuner = fused_norm_gate.layer_norm_gated_fwd_kernel.fn  # the autotuner under the heuristics
    monkeypatch.setattr(tuner, "configs", tuner.configs[:1])
    monkeypatch.setattr(fla_adapters, "_fla_norm_runs", lambda t: True)
    called = []
    real = fused_norm_gate.rms_norm_gated
    monkeypatch.setattr(fused_norm_gate, "rms_norm_gated", lambda *a, **k: called.append(k) or real(*a, **k))
    check_fused_decode(ds, FUSED_DECODE[0], _smoke(ds, FUSED_DECODE[0]))
    assert called and called[0]["activation"] == "sigmoid"


@pytest.mark.slow
@pytest.mark.parametrize("name", FUSED_DECODE)
def test_fused_decode_composed_on_fla_padded_batch(ds, name):
    """The 16-row workload padded with slot -1 (vLLM's PAD_SLOT_ID), ~5-25 s interpreted."""
    w = next(w for w in ds.workloads_of(name) if w.axes["batch_size"] == 16 and "pad_rows" in str(w.inputs["state_indices"]))
    check_fused_decode(ds, name, w)
