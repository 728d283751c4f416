"""`kda-trace import-flashinfer`: FlashInfer-Trace KDA files mapped onto our families.

The definitions in tests/fixtures/flashinfer_trace/ were written by FlashInfer's own template code
(flashinfer/trace/templates/kda.py of flashinfer-python 0.7.2.post1, run on the CPU by
make_fixtures.py, with the `check` field's FlashInfer source elided). FlashInfer's templates write no
workloads: the workloads there are written by make_fixtures.py in the format flashinfer-bench's tracing
writes (trace-set layout, safetensors blobs). `test_fixtures_are_what_flashinfer_writes` re-runs
FlashInfer's template code when the package can be found (KDA_TRACE_FLASHINFER_SRC=<unpacked
wheel>/flashinfer, or an installed flashinfer) and checks the fixtures against it; otherwise it is skipped.
"""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kda_trace.cli import main
from kda_trace.dataset import load_dataset
from kda_trace.import_flashinfer import read_flashinfer_trace
from kda_trace.inputs import make_inputs
from kda_trace.reference import compile_reference

FIX = Path(__file__).parent / "fixtures" / "flashinfer_trace"
SHIPPED = Path(__file__).parent.parent / "definitions" / "kda"
FI_DEF = "recurrent_kda_q2_v4_d64"      # GVA, D=64, traced with a float32 pool
FI_DEF_BF16 = "recurrent_kda_q12_v12_d128"  # Kimi-K3 at TP8, traced with a bfloat16 pool
DECODE_BF16 = "kda_decode_h12_d128_k_last_safe_gate_bf16_state"
MTP_BF16 = "kda_mtp_h12_d128_k_last_safe_gate_bf16_state"


def fi_blob(folder: str, definition: str, uuid: str) -> dict:
    return load_file(str(FIX / folder / "blob" / "workloads" / "kda" / definition / f"{definition}_{uuid}.safetensors"))


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("imported")
    assert main(["import-flashinfer", str(FIX / "good"), "--out", str(out)]) == 0
    return out


@pytest.mark.slow  # a `kda-trace run` of five definitions
def test_import_validates_and_runs(imported, tmp_path):
    assert main(["validate", str(imported)]) == 0
    ds = load_dataset(imported)
    assert sorted(ds.definitions) == [DECODE_BF16, "kda_decode_qk2_v4_d64_k_last_safe_gate", MTP_BF16,
                                      "kda_mtp_qk2_v4_d64_k_last_safe_gate", "kda_prefill_qk2_v4_d64_k_last"]
    assert main(["run", "--dataset", str(imported), "--solution", "reference", "--size", "all",
                 "--out", str(tmp_path / "run")]) == 0
    records = [json.loads(line) for p in (tmp_path / "run" / "traces" / "kda").glob("*.jsonl")
               for line in p.read_text().splitlines()]
    assert len(records) == 6 and all(r["evaluation"]["status"] == "PASSED" for r in records)


def test_definitions_carry_our_reference_and_tags(imported):
    ds = load_dataset(imported)
    d = ds.definitions["kda_decode_qk2_v4_d64_k_last_safe_gate"]
    assert d.const_axes == {"num_heads": 2, "num_v_heads": 4, "head_dim_k": 64, "head_dim_v": 64}
    assert {"stage:decode", "gate:safe", "lower_bound:-5", "beta:logits", "qk_norm:l2", "state_layout:vk",
            "source:flashinfer-trace"} <= set(d.tags)
    assert "NUM_V_HEADS = 4" in d.reference and "HEAD_DIM_K = 64" in d.reference and "LOWER_BOUND = -5.0" in d.reference
    assert d.inputs["state_pool"].dtype == "float32" and d.inputs["state_indices"].dtype == "int64"
    p = ds.definitions["kda_prefill_qk2_v4_d64_k_last"]
    assert "gate:unbounded" in p.tags and "LOWER_BOUND = None" in p.reference


def _recurrence64(q, k, v, g_raw, A_log, dt_bias, beta_logit, S, scale, lower_bound):
    """float64 KDA on FlashInfer's layout: q/k [H, K], v [HV, V], S [HV, V, K]; returns (o [HV, V], S)."""
    HV, K = g_raw.shape
    group = HV // q.shape[0]
    qn = q.double() / torch.sqrt((q.double() ** 2).sum(-1, keepdim=True) + 1e-6)
    kn = k.double() / torch.sqrt((k.double() ** 2).sum(-1, keepdim=True) + 1e-6)
    qn, kn = qn.repeat_interleave(group, 0) * scale, kn.repeat_interleave(group, 0)
    x = g_raw.double() + dt_bias.double().reshape(HV, K)
    a = torch.exp(A_log.double())[:, None]
    g = lower_bound * torch.sigmoid(a * x) if lower_bound is not None else -a * torch.nn.functional.softplus(x)
    beta = torch.sigmoid(beta_logit.double())
    S = S.double() * torch.exp(g)[:, None, :]
    S = S + (beta[:, None] * (v.double() - (S @ kn[..., None])[..., 0]))[..., None] * kn[:, None, :]
    return (S @ qn[..., None])[..., 0], S


def test_decode_replays_flashinfer_tensors(imported):
    """The imported decode workload, run by our reference, equals a float64 recurrence computed straight from
    the tensors FlashInfer recorded, in FlashInfer's layout ([B, 1, H, K] rows, pool slots ssm_state_indices)."""
    ds = load_dataset(imported)
    d = ds.definitions["kda_decode_qk2_v4_d64_k_last_safe_gate"]
    (w,) = ds.workloads_of(d.name)
    inputs = make_inputs(d, w, root=imported)
    fi = fi_blob("good", FI_DEF, "fi-decode-0001")
    assert torch.equal(inputs["q"], fi["q"][:, 0]) and torch.equal(inputs["b"], fi["beta"][:, 0])
    assert inputs["state_pool"].dtype == torch.float32 and torch.equal(inputs["state_pool"], fi["initial_state"])
    assert inputs["state_indices"].tolist() == [2, 0] and inputs["scale"] == pytest.approx(64 ** -0.5)
    o, pool = compile_reference(d.reference, d.name)(**inputs)
    for b, slot in enumerate(fi["ssm_state_indices"].tolist()):
        o64, S64 = _recurrence64(fi["q"][b, 0], fi["k"][b, 0], fi["v"][b, 0], fi["g"][b, 0], inputs["A_log"],
                                 inputs["dt_bias"], fi["beta"][b, 0], fi["initial_state"][slot], 64 ** -0.5, -5.0)
        assert (o[b].double() - o64).abs().max() < 1e-2 * o64.abs().max()  # o is bfloat16
        assert (pool[slot].double() - S64).abs().max() < 1e-5
    assert torch.equal(pool[1], fi["initial_state"][1].float())  # the slot no request uses


def test_bf16_pool_maps_onto_the_bf16_state_definitions(imported):
    """FlashInfer's bf16 pool (recorded, or declared by its definition) gives our _bf16_state definition of the same
    heads, head dim and gate, with the shipped definition's inputs, outputs and reference; the recorded pool is
    kept bit for bit."""
    ds = load_dataset(imported)
    for name in (DECODE_BF16, MTP_BF16):
        ours = json.loads((imported / "definitions" / "kda" / f"{name}.json").read_text())
        shipped = json.loads((SHIPPED / f"{name}.json").read_text())
        assert {k: v for k, v in ours.items() if k not in ("description", "tags")} == \
            {k: v for k, v in shipped.items() if k not in ("description", "tags")}, name
        assert {"feature:bf16_state", "source:flashinfer-trace"} <= set(ours["tags"])
    d = ds.definitions[DECODE_BF16]
    (w,) = [w for w in ds.workloads_of(d.name) if w.uuid == "fi-decode-bf16-0001"]
    inputs = make_inputs(d, w, root=imported)
    fi = fi_blob("good", FI_DEF_BF16, "fi-decode-bf16-0001")
    assert inputs["state_pool"].dtype == torch.bfloat16 and torch.equal(inputs["state_pool"], fi["initial_state"])
    assert inputs["state_indices"].dtype == torch.int32 and inputs["state_indices"].tolist() == [0]
    o, pool = compile_reference(d.reference, d.name)(**inputs)
    _, S64 = _recurrence64(fi["q"][0, 0], fi["k"][0, 0], fi["v"][0, 0], fi["g"][0, 0], inputs["A_log"],
                           inputs["dt_bias"], fi["beta"][0, 0], fi["initial_state"][0], 128 ** -0.5, -5.0)
    assert pool.dtype == torch.bfloat16
    assert ((pool[0].double() - S64).abs() <= 2.0 ** -8 * S64.abs() + 1e-6).all()  # one rounding to bf16
    (m,) = ds.workloads_of(MTP_BF16)
    assert m.axes == {"batch_size": 2, "num_tokens": 2, "pool_size": 4}
    mi = make_inputs(ds.definitions[MTP_BF16], m, root=imported)
    assert mi["state_pool"].dtype == torch.bfloat16 and mi["state_indices"].dtype == torch.int32
    assert mi["state_indices"].tolist() == [0, 2]  # slot [n, 0] of FlashInfer's [B, 1 + S] checkpoint slots


def test_packed_decode_splits_the_qkv_row(imported):
    ds = load_dataset(imported)
    d = ds.definitions[DECODE_BF16]  # packed_kda_decode's pool is bfloat16
    (w,) = [w for w in ds.workloads_of(d.name) if w.uuid == "fi-packed-0001"]
    inputs = make_inputs(d, w, root=imported)
    fi = fi_blob("good", "packed_kda_decode_h12_d128", "fi-packed-0001")
    hd = 12 * 128
    for i, name in enumerate(("q", "k", "v")):
        assert torch.equal(inputs[name], fi["mixed_qkv"][:, i * hd:(i + 1) * hd].reshape(1, 12, 128))
    assert torch.equal(inputs["g_raw"], fi["raw_gate"].reshape(1, 12, 128))
    assert torch.equal(inputs["A_log"], fi["A_log"]) and torch.equal(inputs["dt_bias"], fi["dt_bias"].reshape(12, 128))
    assert inputs["state_indices"].tolist() == [1] and w.axes == {"batch_size": 1, "pool_size": 2}


def test_mtp_and_prefill_shapes(imported):
    ds = load_dataset(imported)
    (m,) = ds.workloads_of("kda_mtp_qk2_v4_d64_k_last_safe_gate")
    assert m.axes == {"batch_size": 2, "num_tokens": 3, "pool_size": 6}
    mi = make_inputs(ds.definitions["kda_mtp_qk2_v4_d64_k_last_safe_gate"], m, root=imported)
    assert mi["state_indices"].tolist() == [0, 3]  # slot [n, 0] of FlashInfer's [B, 1 + S] checkpoint slots
    (p,) = ds.workloads_of("kda_prefill_qk2_v4_d64_k_last")
    pi = make_inputs(ds.definitions["kda_prefill_qk2_v4_d64_k_last"], p, root=imported)
    fi = fi_blob("good", FI_DEF, "fi-prefill-0001")
    assert p.seq_lens == [5] and pi["cu_seqlens"].tolist() == [0, 5] and pi["initial_state"] is None
    assert torch.equal(pi["q"], fi["q"][0]) and torch.equal(pi["g_raw"], fi["g"][0])


def test_problems_name_the_file_and_field():
    result = read_flashinfer_trace(FIX / "bad")
    assert not result.definitions
    text = "\n".join(result.problems)
    assert "bad/workloads/kda/recurrent_kda_q2_v4_d64.jsonl:1: inputs.use_gate_in_kernel:" in text
    assert "bad/workloads/kda/recurrent_kda_q2_v4_d64.jsonl:2: inputs.ssm_state_indices: negative slots" in text
    assert ("bad/workloads/kda/recurrent_kda_q2_v4_d64.jsonl:3: inputs.initial_state: a bfloat16 state pool (not "
            "recorded; recurrent_kda_q2_v4_d64.json declares it), and the dataset has no "
            "kda_decode_qk2_v4_d64_k_last_safe_gate_bf16_state") in text
    assert "bad/definitions/kda/fused_kda_decode_h8_d128.json: name:" in text and "causal convolution" in text
    assert main(["import-flashinfer", str(FIX / "bad"), "--out", "/nonexistent/never-written"]) == 1


def test_definitions_without_workloads(tmp_path):
    src = tmp_path / "dump"
    src.mkdir()
    for name in (FI_DEF, "packed_kda_decode_h12_d128"):  # a FLASHINFER_TRACE_DUMP_DIR: flat definition files
        shutil.copy(FIX / "good" / "definitions" / "kda" / f"{name}.json", src)
    result = read_flashinfer_trace(src)
    assert list(result.definitions) == [DECODE_BF16]  # its gate and bf16 pool are fixed by the op
    (problem,) = result.problems
    assert problem.startswith(f"{src / FI_DEF}.json: workloads: none found")


def test_bare_workload_lines_and_reimport(tmp_path):
    """A `<definition>.jsonl` of bare workloads with blob paths relative to the file; importing twice adds nothing."""
    src = tmp_path / "trace"
    shutil.copytree(FIX / "good", src)
    wfile = src / "workloads" / "kda" / f"{FI_DEF}.jsonl"
    rows = [json.loads(line)["workload"] for line in wfile.read_text().splitlines()]
    for row in rows:
        for spec in row["inputs"].values():
            if spec["type"] == "safetensors":
                spec["path"] = os.path.relpath(src / spec["path"], wfile.parent)
    wfile.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["import-flashinfer", str(src), "--out", str(out)]) == 0
    assert main(["import-flashinfer", str(src), "--out", str(out)]) == 0
    ds = load_dataset(out)
    assert not ds.problems and sum(len(ds.workloads_of(n)) for n in ds.definitions) == 6


def _flashinfer_package_dir():
    env = os.environ.get("KDA_TRACE_FLASHINFER_SRC")
    if env:
        return env
    spec = importlib.util.find_spec("flashinfer")
    return None if spec is None or not spec.submodule_search_locations else list(spec.submodule_search_locations)[0]


def test_fixtures_are_what_flashinfer_writes(tmp_path):
    src = _flashinfer_package_dir()
    if src is None or not (Path(src) / "trace" / "templates" / "kda.py").is_file():
        pytest.skip("FlashInfer's package is not here (set KDA_TRACE_FLASHINFER_SRC=<unpacked wheel>/flashinfer)")
    spec = importlib.util.spec_from_file_location("make_fixtures", FIX / "make_fixtures.py")
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    kda = mk.load_kda_templates(src)
    for folder, entries in mk.calls().items():
        for template_name, fi_api, call, _ in entries:
            fresh = mk.write_definition(getattr(kda, template_name), fi_api, tmp_path / folder, **call)
            stored = json.loads((FIX / folder / "definitions" / "kda" / f"{fresh['name']}.json").read_text())
            assert fresh == stored, fresh["name"]


def test_recorded_shapes_must_match_the_definition(tmp_path):
    src = tmp_path / "trace"
    shutil.copytree(FIX / "good", src)
    dpath = src / "definitions" / "kda" / f"{FI_DEF}.json"
    defn = json.loads(dpath.read_text())
    defn["axes"]["num_q_heads"]["value"] = 4  # the recorded q has 2 heads
    dpath.write_text(json.dumps(defn))
    problems = "\n".join(read_flashinfer_trace(src).problems)
    assert f"{FI_DEF}.jsonl:1: inputs (q of our decode family): recorded shape [2, 2, 64] != [2, 4, 64]" in problems


def test_bf16_pool_needs_a_definition_with_its_gate(tmp_path):
    """A recorded bf16 pool whose gate (lower bound -3) no _bf16_state definition has is refused, naming the line and
    field; the float32-pool definitions are built for any gate and heads, so nothing else falls back to them."""
    src = tmp_path / "trace"
    shutil.copytree(FIX / "good", src)
    wfile = src / "workloads" / "kda" / f"{FI_DEF_BF16}.jsonl"
    rows = [json.loads(line) for line in wfile.read_text().splitlines()]
    rows[0]["workload"]["inputs"]["lower_bound"]["value"] = -3.0
    wfile.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = read_flashinfer_trace(src)
    (problem,) = result.problems
    assert problem.startswith(f"{wfile}:1: inputs.initial_state: a bfloat16 state pool (the recorded tensor), and "
                              "the dataset has no kda_decode_h12_d128_k_last_safe_gate_lbm3_bf16_state: its "
                              "bfloat16-state decode definitions are kda_decode_h12_d128_k_last_safe_gate_bf16_state, ")
    assert "kda_decode_h12_d128_k_last_safe_gate_lbm3" not in result.definitions
