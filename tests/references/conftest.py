"""Shared helpers of the reference tests: the dataset, compiled references, custom workloads, the
adapters from a definition's inputs to the ground truth's convention, the tolerance table, and the
assertion that prints full metrics on failure.

References are compiled from the definition JSON with kda_trace.reference.compile_reference and fed
inputs from kda_trace.inputs.make_inputs: the same path the runner takes.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import coverage_cells
import ground_truth as gt
import pytest
import torch

from kda_trace.compare import compare_output, tolerance_for
from kda_trace.dataset import load_dataset
from kda_trace.inputs import DEFAULT_SEED, make_inputs
from kda_trace.platform import default_device, ensure_triton_can_run, has_cuda
from kda_trace.reference import compile_reference
from kda_trace.schema import Definition, RandomInput, ScalarInput, Tolerance, Workload

REPO = Path(__file__).resolve().parents[2]
DEVICE = default_device()
ensure_triton_can_run(DEVICE)  # without CUDA, fla's Triton kernels can only run interpreted (set before fla loads)
f64 = torch.float64

# ----------------------------------------------------------------------------------- tolerances
# The ONE table of tolerances of these tests (kda_trace.compare applies them).
#
# Why two rows for the same outputs: the references compute in float32 and cast o to bf16 at the end.
# Judged as bf16 against float64 truth, a reference with a float32-level bug (a wrong eps, a cast in the
# wrong place, a tf32 matmul) would hide under the bf16 rounding. So every reference is run twice: on the
# workload's own (bf16) inputs, and on the same values upcast to float32 (exact: every bf16 is a float32).
# The float32 run is judged against float64 truth with "fp32" (RMS-relative <= 1e-5); the bf16 run must
# then be bit-identical to the float32 run's outputs cast to bf16 (so the references compute in float32
# whatever their input dtype), and is also judged with "bf16_cast", the bound that rounding to bf16
# alone allows (half an ulp: 2^-9 relative). final_state stays float32 in both runs and is judged
# tightly either way.
TOLERANCES: dict[str, Tolerance] = {
    # float32 computation against float64 truth (o, states, gates)
    "fp32": Tolerance(atol=1e-5, rtol=1e-4, min_matched_ratio=1.0, max_rms_rel_error=1e-5, min_cosine=0.9999999),
    # float32 gradients (through a T-step recurrence) against float64 autograd
    "fp32_grad": Tolerance(atol=1e-5, rtol=1e-3, min_matched_ratio=1.0, max_rms_rel_error=1e-5,
                           min_cosine=0.9999999),
    # a float32 result rounded once to bf16, against float64 truth
    "bf16_cast": Tolerance(atol=1e-6, rtol=2.0 ** -8, min_matched_ratio=1.0, max_rms_rel_error=3e-3,
                           min_cosine=0.99999),
}
# Bounds of the ground truths themselves (test_ground_truth.py): two float64 formulations agree to
# TRUTH_AGREEMENT (max error relative to the largest value); fla's Triton kernels on float32 inputs reach
# FLA_FP32_RMS (RMS-relative) against float64: fused_recurrent_kda is float32 throughout, chunk_kda's
# tensor-core products round to tf32.
TRUTH_AGREEMENT = 1e-10
FLA_FP32_RMS = {"recurrent": 1e-5, "chunk": 5e-3}
# fla's Triton kernels on bf16 inputs against the reference (GPU tier) are judged with tol="definition":
# each output's own tolerance from the definition (kda_trace.compare.tolerance_for), the verdict the runner
# gives a solution, so that test also shows that a production kernel can meet the dataset's bounds.


# -------------------------------------------------------------------------------------- dataset
@cache
def dataset():
    """The repository's dataset (loaded once)."""
    ds = load_dataset(REPO)
    return ds


def definitions(family: str) -> list[Definition]:
    """Definitions of one family (`stage:` tag), sorted by name."""
    return [d for d in dataset().select(op_type="kda") if coverage_cells.family_of(d) == family]


def family_params(family: str, fast: str = "all") -> list[Any]:
    """pytest params over a family's definitions. fast='all': every definition runs in the fast tier;
    fast='one': only the one with the smallest state does (coverage_cells.representative); fast='cells': the
    fewest that together claim every cell of the family do (coverage_cells.covering). The others are marked slow."""
    defs = definitions(family)
    if not defs:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no {family} definitions in the dataset"))]
    if fast == "all":
        return [pytest.param(d, id=d.name) for d in defs]
    chosen = [coverage_cells.representative(defs)] if fast == "one" else coverage_cells.covering(defs)
    return [pytest.param(d, id=d.name, marks=() if any(d is c for c in chosen) else pytest.mark.slow) for d in defs]


# The dataset grid's tiers. A workload of at most CPU_MAX_SIZE tokens x value heads whose largest tensor has at most
# CPU_MAX_ELEMENTS elements is in the slow tier, which CI runs on 2 CPU cores (`make test-slow`); the rest of the
# grid is marked large (`make test-large`: a GPU, or hours of CPU). On 2 busy CPU cores an 8192-token prefill
# workload of 12 heads (98304) took 203 s, one of 16384 took 23 s, a 256-token MTP batch of 8 heads with a
# 2^24-element pool 20 s: at such rates the slow tier's 131 workloads take about 5 minutes there.
CPU_MAX_SIZE = 4096
CPU_MAX_ELEMENTS = 2 ** 22


def grid_mark(d: Definition, w: Workload, max_tokens: int = 8192, max_elements: int = 2 ** 27,
              cpu_max_size: int = CPU_MAX_SIZE):
    """The tier of a dataset workload outside the fast tier: stress where it is tagged stress, has more than
    max_tokens tokens or a tensor of more than max_elements elements (a 512-slot pool of 96 heads is 805M);
    slow where it is CPU-sized (cpu_max_size, CPU_MAX_ELEMENTS); else large."""
    largest = largest_tensor(d, w)
    if "stress" in w.tags or workload_tokens(d, w) > max_tokens or largest > max_elements:
        return pytest.mark.stress
    if workload_size(d, w) <= cpu_max_size and largest <= CPU_MAX_ELEMENTS:
        return pytest.mark.slow
    return pytest.mark.large


def workload_params(family: str, max_tokens: int = 8192, max_elements: int = 2 ** 27) -> list[Any]:
    """pytest params over every dataset workload of a family ("defname-N" ids), each marked slow, large or
    stress by grid_mark."""
    return [pytest.param(d, w, id=f"{d.name}-{i}", marks=grid_mark(d, w, max_tokens, max_elements))
            for d in definitions(family) for i, w in enumerate(dataset().workloads_of(d.name))]


def largest_tensor(d: Definition, w: Workload) -> int:
    """Elements of the workload's largest input or output."""
    axes = {**d.const_axes, **w.axes}
    sizes = [1]
    for spec in [*d.inputs.values(), *d.outputs.values()]:
        n = 1
        for dim in d.shape_of(spec, axes) or []:
            n *= dim
        sizes.append(n)
    return max(sizes)


def workload_tokens(d: Definition, w: Workload) -> int:
    """Tokens of a workload (packed tokens, batch x tokens, or requests x tokens)."""
    axes = {**d.const_axes, **w.axes}
    if "total_seq_len" in axes:
        return axes["total_seq_len"]
    tokens = 1
    for a in ("batch_size", "seq_len", "num_tokens"):
        tokens *= axes.get(a, 1)
    return tokens


def workload_size(d: Definition, w: Workload) -> int:
    """Tokens x value heads of a workload (its cost driver)."""
    axes = {**d.const_axes, **w.axes}
    return workload_tokens(d, w) * axes.get("num_v_heads", axes.get("num_heads", 1))


@cache
def _compiled(name: str, source: str):
    return compile_reference(source, name)


def reference(d: Definition):
    """The definition's reference `run`, compiled from its JSON (the runner's path)."""
    return _compiled(d.name, d.reference)


def smoke_workloads(d: Definition) -> list[Workload]:
    return [w for w in dataset().workloads_of(d.name) if "smoke" in w.tags]


def custom_workload(d: Definition, axes: dict[str, int], seq_lens: list[int] | None = None,
                    absent: Sequence[str] = (), generators: dict[str, dict] | None = None) -> Workload:
    """A small workload of `d` made here (token counts of our choosing; heads and dims are the
    definition's). `absent`: optional inputs set to None. scale = head_dim_k ** -0.5."""
    inputs: dict[str, Any] = {}
    for name, spec in d.inputs.items():
        if spec.shape is None:
            inputs[name] = ScalarInput(value=d.const_axes.get("head_dim_k", 128) ** -0.5)
        elif name in absent:
            inputs[name] = RandomInput(generator={"kind": "none"})
        elif generators and name in generators:
            inputs[name] = RandomInput(generator=generators[name])
        else:
            inputs[name] = RandomInput()
    key = f"{d.name}:{sorted(axes.items())}:{seq_lens}:{sorted(absent)}:{generators}"
    return Workload(uuid=str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, key)), axes=axes, inputs=inputs,
                    seq_lens=seq_lens, tags=["reference-test"])


def inputs_of(d: Definition, w: Workload, device: str = "cpu", seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Fresh inputs of a workload (make_inputs: the runner's path)."""
    return make_inputs(d, w, seed=seed, device=device, root=REPO)


def upcast(inputs: dict[str, Any]) -> dict[str, Any]:
    """The same values with every bf16/fp16 tensor as float32 (exact)."""
    return {k: v.float() if isinstance(v, torch.Tensor) and v.dtype in (torch.bfloat16, torch.float16) else v
            for k, v in inputs.items()}


def run_reference(d: Definition, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Call the reference and name its outputs in the definition's order."""
    out = reference(d)(**inputs)
    out = out if isinstance(out, (tuple, list)) else (out,)
    assert len(out) == len(d.outputs), f"{d.name}: reference returned {len(out)} outputs, definition has {len(d.outputs)}"
    return dict(zip(d.outputs, out))


def check_output_specs(d: Definition, w: Workload, outputs: dict[str, torch.Tensor], dtypes: bool = True) -> None:
    """Every output has the definition's shape (for this workload's axes) and dtype."""
    from kda_trace.inputs import torch_dtype

    axes = {**d.const_axes, **w.axes}
    for name, spec in d.outputs.items():
        t = outputs[name]
        want = d.shape_of(spec, axes)
        assert list(t.shape) == want, f"{d.name} workload {w.uuid}: output {name} has shape {list(t.shape)}, definition says {want} ({spec.shape})"
        if dtypes:
            assert t.dtype == torch_dtype(spec.dtype), f"{d.name}: output {name} is {t.dtype}, definition says {spec.dtype.value}"


def assert_bits_equal(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """Bit-identical tensors (same shape and dtype), else fail naming the first differing element."""
    assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
    from kda_trace.compare import bits_equal

    same = bits_equal(a, b)
    if not bool(same.all()):
        bad = (~same).nonzero()
        first = bad[0].tolist()
        pytest.fail(f"{what}: {bad.shape[0]} of {a.numel()} elements differ; first at index {first}: "
                    f"{a[tuple(first)].item()!r} vs {b[tuple(first)].item()!r}")


# ------------------------------------------------------------------------------------ assertions
def report(d: Definition, output: str, metrics, what: str) -> str:
    """The failure message: every metric and the five worst elements by axis name."""
    m = metrics
    lines = [f"{d.name} {output} ({what}): {m.reason}",
             (f"  max abs {m.max_abs_error:.3e}  mean abs {m.mean_abs_error:.3e}  max rel {m.max_rel_error:.3e}  "
              f"mean rel {m.mean_rel_error:.3e}"),
             (f"  RMS-relative {m.rms_rel_error:.3e}  cosine {m.cosine:.10f}  MSE {m.mse:.3e}  "
              f"matched {m.matched_ratio:.6f}  NaN {m.nan_count} Inf {m.inf_count}"),
             f"  tolerance {m.tolerance.model_dump(exclude_none=True)}",
             "  worst elements:"]
    lines += [f"    {x.where}: truth {x.reference:.8g}, got {x.value:.8g} (|err| {x.abs_error:.3e})" for x in m.worst]
    return "\n".join(lines)


def assert_close(d: Definition, output: str, truth: torch.Tensor, got: torch.Tensor, tol: str, what: str,
                 cu_seqlens: torch.Tensor | None = None):
    """Judge `got` against `truth` with TOLERANCES[tol] (or the definition's own tolerance when
    tol == "definition"); on failure print the metrics and fail."""
    assert tuple(truth.shape) == tuple(got.shape), f"{d.name} {output} ({what}): shape {tuple(got.shape)} != {tuple(truth.shape)}"
    if torch.isnan(truth).any() or torch.isinf(truth).any():
        pytest.fail(f"{d.name} {output} ({what}): the ground truth itself is not finite")
    tolerance = tolerance_for(d, output) if tol == "definition" else TOLERANCES[tol]
    m = compare_output(d, output, truth.detach().cpu(), got.detach().cpu(), tolerance,
                       cu_seqlens=None if cu_seqlens is None else cu_seqlens.cpu())
    if not m.passed:
        pytest.fail(report(d, output, m, what), pytrace=False)
    return m


def require_cuda(reason: str = "needs a CUDA device (fla's Triton kernels)") -> None:
    if not has_cuda():
        pytest.skip(f"no CUDA device: {reason}")


# ------------------------------------------------------------- adapters: definition <-> fla convention
def tags(d: Definition):
    """(gate, lower_bound, beta, qk_norm, state_layout) from the definition's tags, checked against its inputs."""
    gate = d.tag("gate")
    lower_bound = d.tag("lower_bound")
    in_op_gate = "g_raw" in d.inputs
    assert (gate in ("safe", "unbounded")) == in_op_gate, f"{d.name}: tag gate:{gate} but inputs {list(d.inputs)}"
    assert (gate == "safe") == (lower_bound is not None), f"{d.name}: gate:{gate} with lower_bound:{lower_bound}"
    beta = d.tag("beta")
    assert (beta == "logits") == ("b" in d.inputs), f"{d.name}: tag beta:{beta} but inputs {list(d.inputs)}"
    return (gate, None if lower_bound is None else float(lower_bound), beta, d.tag("qk_norm"),
            d.tag("state_layout"))


def to_problem(d: Definition, x: dict[str, Any], fla_ops: bool = False) -> gt.Problem:
    """A definition's inputs as a float64 ground-truth Problem (fla convention), the gate, beta and
    norm applied by the ground truth (ours, or fla's gate with fla_ops=True). Records the cells it
    exercised for the coverage guard."""
    gate, lower_bound, beta_kind, qk_norm, layout = tags(d)
    family = coverage_cells.family_of(d)
    x = real_requests(x)
    q, k, v = x["q"], x["k"], x["v"]
    cu = x.get("cu_seqlens")
    if cu is not None:                       # packed [T, ...] -> [1, T, ...]
        lift = lambda t: t[None]
        batch = "varlen"
    elif family == "decode":                 # [B, ...] -> one token per request: [B, 1, ...]
        lift = lambda t: t[:, None]
        batch = "pool"
    else:
        lift = lambda t: t
        batch = "pool" if "state_pool" in x else "dense"

    if gate == "precomputed":
        g = x["g"].to(f64)
    else:
        fn = gt.fla_gate if fla_ops else gt.gate
        g = fn(x["g_raw"], x["A_log"], x["dt_bias"], lower_bound)
    beta = gt.sigmoid(x["b"]) if beta_kind == "logits" else x["beta"].to(f64)
    if qk_norm == "l2":
        q, k = gt.l2_normalize(q), gt.l2_normalize(k)

    if "state_pool" in x:
        h0 = x["state_pool"][x["state_indices"].long()]
    else:
        h0 = x.get("initial_state")
    if h0 is not None:
        h0 = gt.state_to_kv(h0.to(f64), layout)

    HV, H = v.shape[-2], q.shape[-2]
    coverage_cells.observe(
        d.name, batch=batch, gate=gate, beta=beta_kind, qk_norm=qk_norm, state_layout=layout,
        initial_state="absent" if h0 is None else "given", final_state="returned",
        gva="on" if HV > H else "off", kv_dims="equal" if q.shape[-1] == v.shape[-1] else "differ",
        direction="backward" if family == "backward" else "forward")
    return gt.Problem(q=lift(q).to(f64), k=lift(k).to(f64), v=lift(v).to(f64), g=lift(g), beta=lift(beta),
                      scale=float(x["scale"]), h0=h0, cu_seqlens=None if cu is None else cu.tolist())


REQUEST_INPUTS = ("q", "k", "v", "g_raw", "g", "b", "beta", "state_indices")  # one row per request of a pool call


def real_requests(x: dict[str, Any]) -> dict[str, Any]:
    """A decode / mtp pool call without its padding rows (slot -1 after the real requests): the rows the ground
    truth runs. Other inputs are returned as they are."""
    idx = x.get("state_indices")
    if idx is None or idx.dim() != 1 or bool((idx >= 0).all()):
        return x
    R = int((idx >= 0).sum())
    return {n: (t[:R] if n in REQUEST_INPUTS else t) for n, t in x.items()}


def from_truth(d: Definition, x: dict[str, Any], o: torch.Tensor, ht: torch.Tensor) -> dict[str, torch.Tensor]:
    """Ground-truth (o [B, T, HV, V], ht [N, HV, K, V]) as the definition's outputs, float64. Padding rows of a
    pool call (slot -1) get o = 0 and write nothing."""
    layout = d.tag("state_layout")
    family = coverage_cells.family_of(d)
    if "cu_seqlens" in x:
        o = o[0]
    elif family == "decode":
        o = o[:, 0]
    state = gt.state_from_kv(ht, layout)
    if "state_pool" in x:  # built on the CPU (where compare_output works anyway): pools can be large
        real = real_requests(x)
        R = real["state_indices"].shape[0]
        if R < x["state_indices"].shape[0]:
            o = torch.cat([o, o.new_zeros((x["state_indices"].shape[0] - R, *o.shape[1:]))])
        pool = x["state_pool"].to("cpu", f64)
        pool[real["state_indices"].long().cpu()] = state.cpu()
        return {"o": o, "new_state_pool": pool}
    return {"o": o, "final_state": state}


# ------------------------------------------------------------------------------ the coverage guard
def pytest_configure(config):
    config.addinivalue_line("markers", "kda_covers(family, cells): coverage cells a reference test exercises "
                                       "(set with coverage_cells.covers)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.kda_call_passed = rep.passed


@pytest.fixture(autouse=True)
def coverage_guard(request):
    """For a test with @covers: after it passed, every declared axis must have been exercised with the
    values its definition claims (the adapters record what they did). The check is per test item, so a
    test run once per dataset workload declares only what every workload exercises."""
    marks = list(request.node.iter_markers("kda_covers"))
    if not marks:
        yield
        return
    record = coverage_cells.Observed()
    coverage_cells.CURRENT.append(record)
    try:
        yield
    finally:
        coverage_cells.CURRENT.remove(record)
    if not getattr(request.node, "kda_call_passed", False):
        return
    if not record.cells:
        pytest.fail(f"{request.node.nodeid} declares coverage cells but exercised no definition")
    for name, observed in record.cells.items():
        d = dataset().definitions[name]
        family = coverage_cells.family_of(d)
        declared = [m.kwargs["cells"] for m in marks if m.kwargs["family"] == family]
        if not declared:
            pytest.fail(f"{request.node.nodeid} exercised {name} (family {family}) without declaring that family")
        for cells in declared:
            missing = coverage_cells.missing_cells(d, cells, observed)
            if missing:
                pytest.fail(f"{request.node.nodeid} declares {', '.join(missing)} for {name} but did not exercise it")


# ------------------------------------------------------------------ the reference vs ground truth
def reference_runs(d: Definition, w: Workload, device: str = "cpu"):
    """Steps 1 and 2 of check_against_truth, for every family that runs a reference on a workload:
    (inputs, their outputs, the inputs upcast to float32, their outputs)."""
    x = inputs_of(d, w, device)
    before = {k: v.clone() for k, v in x.items() if isinstance(v, torch.Tensor)}
    out = run_reference(d, x)
    check_output_specs(d, w, out)
    for k, v in before.items():
        assert_bits_equal(x[k], v, f"{d.name}: input {k} after the reference ran (inputs must not be mutated)")
    x32 = upcast(x)
    out32 = run_reference(d, x32)
    for name, t in out.items():
        assert_bits_equal(t, out32[name].to(t.dtype), f"{d.name} {name}: bf16-input run vs float32-input run cast")
    return x, out, x32, out32


def check_against_truth(d: Definition, w: Workload, device: str = "cpu", chunk: int = 16,
                        with_fla_naive: bool = True) -> dict[str, torch.Tensor]:
    """The main comparison of a forward-type family (prefill, forward, decode, mtp) on one workload:

    1. the reference on the workload's inputs: outputs have the definition's shapes and dtypes;
    2. the reference on the same values upcast to float32: the bf16 run's outputs are bit-identical to
       these cast to the output dtype (float32 internals), and the inputs are left untouched;
    3. the float32 run against our chunked float64 form (our gate) and, with with_fla_naive, fla's
       naive recurrence run in float64 (fla's gate) with TOLERANCES["fp32"]; the bf16 run against the
       chunked truth with TOLERANCES["bf16_cast"];
    4. for a state pool: slots outside state_indices are bit-identical to the input pool.
    Returns the float32 run's outputs."""
    x, out, x32, out32 = reference_runs(d, w, device)

    cu = x.get("cu_seqlens")
    truths = {"chunked float64": from_truth(d, x, *gt.chunked(to_problem(d, x32), chunk=chunk))}
    if with_fla_naive:
        truths["fla naive_recurrent_kda float64"] = from_truth(d, x, *gt.fla_recurrent(to_problem(d, x32, fla_ops=True)))
    for what, truth in truths.items():
        for name in d.outputs:
            assert_close(d, name, truth[name], out32[name], "fp32", f"float32 reference vs {what}", cu)
    chunk_truth = truths["chunked float64"]
    for name, t in out.items():
        if t.dtype in (torch.bfloat16, torch.float16):
            assert_close(d, name, chunk_truth[name], t, "bf16_cast", "bf16 reference vs chunked float64", cu)
    if "state_pool" in x:
        check_untouched_slots(d, x, out["new_state_pool"])
    return out32


def check_untouched_slots(d: Definition, x: dict[str, Any], new_pool: torch.Tensor) -> None:
    """Pool slots not named by state_indices (padding rows' -1 names none) are bit-identical to the input pool."""
    touched = torch.zeros(new_pool.shape[0], dtype=torch.bool, device=new_pool.device)
    idx = x["state_indices"].long()
    touched[idx[idx >= 0]] = True
    if bool(touched.all()):
        return  # a workload that uses every slot has none to check
    assert_bits_equal(new_pool[~touched], x["state_pool"][~touched], f"{d.name}: untouched pool slots")


# ------------------------------------------------------------------------------ fla's Triton kernels
def fla_call(d: Definition, x: dict[str, Any]) -> gt.RawCall:
    """A definition's inputs as a call of fla's kernels, which then do the gate, beta sigmoid, L2 norm
    and state layout themselves (a pool's slots are gathered here)."""
    gate, lower_bound, beta_kind, qk_norm, layout = tags(d)
    if "cu_seqlens" in x:
        lift = lambda t: t[None]
    elif coverage_cells.family_of(d) == "decode":
        lift = lambda t: t[:, None]
    else:
        lift = lambda t: t
    pool = "state_pool" in x
    h0 = x["state_pool"][x["state_indices"].long()].contiguous() if pool else x.get("initial_state")
    in_gate = gate != "precomputed"
    return gt.RawCall(q=lift(x["q"]), k=lift(x["k"]), v=lift(x["v"]), g=lift(x["g_raw"] if in_gate else x["g"]),
                      beta=lift(x["b"] if beta_kind == "logits" else x["beta"]), scale=float(x["scale"]), h0=h0,
                      cu_seqlens=x.get("cu_seqlens"), A_log=x["A_log"] if in_gate else None,
                      dt_bias=x["dt_bias"] if in_gate else None, lower_bound=lower_bound,
                      beta_logits=beta_kind == "logits", qk_l2norm=qk_norm == "l2", layout=layout)


def fla_outputs(d: Definition, x: dict[str, Any], o: torch.Tensor, ht: torch.Tensor) -> dict[str, torch.Tensor]:
    """fla's (o [B, T, HV, V], final states in the definition's layout) as the definition's outputs."""
    if "cu_seqlens" in x:
        o = o[0]
    elif coverage_cells.family_of(d) == "decode":
        o = o[:, 0]
    if "state_pool" in x:
        pool = x["state_pool"].clone()
        pool[x["state_indices"].long()] = ht.to(pool.dtype)
        return {"o": o, "new_state_pool": pool}
    return {"o": o, "final_state": ht}


def check_against_fla(d: Definition, w: Workload, kernel: str, device: str, fp32: bool = False) -> None:
    """The reference against fla's Triton `chunk_kda` or `fused_recurrent_kda` on the same inputs: the
    workload's own dtypes judged with the definition's tolerance, or (fp32=True) the values upcast to
    float32 judged with TOLERANCES["fp32"]."""
    x = inputs_of(d, w, device)
    x = upcast(x) if fp32 else x
    to_problem(d, x)  # records the cells exercised
    ref = run_reference(d, x)
    got = fla_outputs(d, x, *gt.fla_triton(fla_call(d, x), kernel))
    what = f"fla {kernel} kernel ({'float32' if fp32 else 'workload dtypes'}) vs reference"
    for name in d.outputs:
        assert_close(d, name, ref[name].float(), got[name].float(), "fp32" if fp32 else "definition", what,
                     x.get("cu_seqlens"))
