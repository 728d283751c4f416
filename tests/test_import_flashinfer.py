"""`kda-trace import-flashinfer`: FlashInfer-Trace KDA files mapped onto our families.

The definitions in tests/fixtures/flashinfer_trace/ were written by FlashInfer's own template code
(flashinfer/trace/templates/kda.py of flashinfer-python 0.7.2.post1, run on the CPU by
make_fixtures.py, with the `check` field's FlashInfer source elided). FlashInfer's templates write no
workloads: the workloads there are written by make_fixtures.py in the format flashinfer-bench's tracing
writes (trace-set layout, safetensors blobs). `test_fixtures_are_what_flashinfer_writes` re-runs
FlashInfer's template code when the package can be found (KDA_TRACE_FLASHINFER_SRC=<unpacked
wheel>/flashinfer, or an installed flashinfer) and checks the fixtures against it; otherwise it is skipped.
The fused-decode fixtures (fused/, and bad/'s packed_fused_kda_decode definition) are written the same way by
make_fused_fixtures.py from flashinfer-python 0.7.4's templates (`test_fused_fixtures_are_what_flashinfer_writes`).
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
FUSED_BF16 = "kda_fused_decode_h12_d128_k_last_safe_gate_bf16_state"
FUSED_H8 = "kda_fused_decode_h8_d128_k_last"
FUSED_H8_EPS = "kda_fused_decode_h8_d128_k_last_safe_gate_eps1em06"
DECODE_BF16 = "kda_decode_h12_d128_k_last_safe_gate_bf16_state"
MTP_BF16 = "kda_mtp_h12_d128_k_last_safe_gate_bf16_state"


def fi_blob(folder: str, definition: str, uuid: str) -> dict:
    return load_file(str(FIX / folder / "blob" / "workloads" / "kda" / definition / f"{definition}_{uuid}.safetensors"))


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("imported")
    assert main(["import-flashinfer", str(FIX / "good"), "--out", str(out)]) == 0
    return out


def _reference_run(dataset, out) -> list:
    """The records of `kda-trace run --solution reference --size all` on an imported dataset (the run must succeed)."""
    assert main(["run", "--dataset", str(dataset), "--solution", "reference", "--size", "all", "--out", str(out)]) == 0
    return [json.loads(line) for p in (out / "traces" / "kda").glob("*.jsonl") for line in p.read_text().splitlines()]


@pytest.mark.slow  # a `kda-trace run` of five definitions
def test_import_validates_and_runs(imported, tmp_path):
    assert main(["validate", str(imported)]) == 0
    ds = load_dataset(imported)
    assert sorted(ds.definitions) == [DECODE_BF16, "kda_decode_qk2_v4_d64_k_last_safe_gate", MTP_BF16,
                                      "kda_mtp_qk2_v4_d64_k_last_safe_gate", "kda_prefill_qk2_v4_d64_k_last"]
    records = _reference_run(imported, tmp_path / "run")
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
    assert "bad/definitions/kda/fused_kda_decode_h8_d128.json: workloads: none found" in text and "lower_bound" in text
    assert ("bad/definitions/kda/packed_fused_kda_decode_t2_h12_d128.json: name: 'packed_fused_kda_decode_t2_h12_d128': "
            "it runs up to num_tokens tokens per sequence") in text
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


def _fixture_script(filename: str):
    """A fixture-making script of FIX, imported from its file."""
    spec = importlib.util.spec_from_file_location(filename.removesuffix(".py"), FIX / filename)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def _assert_definitions_as_stored(make_fixtures, calls, flashinfer_version: str, tmp_path) -> None:
    """Each definition that `calls` (a fixture script's calls()) makes through FlashInfer's own templates, as
    make_fixtures.py writes it, equals the one stored under FIX."""
    kda = make_fixtures.load_kda_templates(_flashinfer_templates(flashinfer_version))
    for folder, entries in calls.items():
        for template_name, fi_api, call, _ in entries:
            fresh = make_fixtures.write_definition(getattr(kda, template_name), fi_api, tmp_path / folder, **call)
            stored = json.loads((FIX / folder / "definitions" / "kda" / f"{fresh['name']}.json").read_text())
            assert fresh == stored, fresh["name"]


def test_fixtures_are_what_flashinfer_writes(tmp_path):
    mk = _fixture_script("make_fixtures.py")
    # 0.7.4's fused_kda_decode template lists two more head counts
    _assert_definitions_as_stored(mk, mk.calls(), "0.7.2.post1", tmp_path)


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


# --------------------------------------------------------------------------- fused_kda_decode -> fused_decode

def _flashinfer_templates(version: str):
    """FlashInfer's KDA templates from KDA_TRACE_FLASHINFER_SRC / an installed flashinfer of `version`, else a skip."""
    src = _flashinfer_package_dir()
    if src is None or not (Path(src) / "trace" / "templates" / "kda.py").is_file():
        pytest.skip("FlashInfer's package is not here (set KDA_TRACE_FLASHINFER_SRC=<unpacked wheel>/flashinfer)")
    meta = Path(src) / "_build_meta.py"
    if not meta.is_file() or f'__version__ = "{version}"' not in meta.read_text():
        pytest.skip(f"these fixtures were written by flashinfer-python {version}'s templates")
    return src


@pytest.fixture(scope="module")
def fused_imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("fused")
    assert main(["import-flashinfer", str(FIX / "fused"), "--out", str(out)]) == 0
    return out


def test_fused_decode_maps_onto_the_fused_family(fused_imported):
    """fused_kda_decode's inputs become the fused_decode family's (weight -> conv_weight, raw_gate [1, B, H, D] -> g_raw,
    raw_beta -> b, dt_bias [H * D] -> [H, D], state -> state_pool), padding slots (-1, 0) kept; its bf16 pool gives the
    shipped _bf16_state definition, a float32 one a definition built for its heads, gate (lower_bound: -5.0 when not
    recorded, null the unbounded gate) and norm_eps."""
    ds = load_dataset(fused_imported)
    assert not ds.problems and sorted(ds.definitions) == [FUSED_BF16, FUSED_H8, FUSED_H8_EPS]
    ours = json.loads((fused_imported / "definitions" / "kda" / f"{FUSED_BF16}.json").read_text())
    shipped = json.loads((SHIPPED / f"{FUSED_BF16}.json").read_text())
    assert {k: v for k, v in ours.items() if k not in ("description", "tags")} == \
        {k: v for k, v in shipped.items() if k not in ("description", "tags")}
    assert {"stage:fused_decode", "gate:safe", "lower_bound:-5", "feature:bf16_state", "source:flashinfer-trace"} <= set(ours["tags"])
    h8, eps = ds.definitions[FUSED_H8], ds.definitions[FUSED_H8_EPS]
    assert "gate:unbounded" in h8.tags and "LOWER_BOUND = None" in h8.reference and "NORM_EPS = 1e-05" in h8.reference
    assert "NORM_EPS = 1e-06" in eps.reference and "LOWER_BOUND = -5.0" in eps.reference
    assert h8.const_axes["num_heads"] == 8 and h8.inputs["state_pool"].dtype == "float32"
    d = ds.definitions[FUSED_BF16]
    (w,) = ds.workloads_of(FUSED_BF16)
    assert w.axes == {"batch_size": 2, "pool_size": 3} and "smoke" in w.tags
    inputs = make_inputs(d, w, root=fused_imported)
    fi = fi_blob("fused", "fused_kda_decode_h12_d128", "fi-fused-bf16-0001")
    pairs = {"x": "x", "conv_weight": "weight", "conv_state": "conv_state", "A_log": "A_log",
             "output_gate": "output_gate", "norm_weight": "norm_weight"}
    for ours_name, theirs in pairs.items():
        assert torch.equal(inputs[ours_name], fi[theirs]), ours_name
    assert torch.equal(inputs["g_raw"], fi["raw_gate"][0]) and torch.equal(inputs["b"], fi["raw_beta"][0])
    assert torch.equal(inputs["dt_bias"], fi["dt_bias"].view(12, 128))
    assert inputs["state_indices"].dtype == torch.int32 and inputs["state_indices"].tolist() == [2, -1]
    assert inputs["state_pool"].dtype == torch.bfloat16 and inputs["scale"] == pytest.approx(128 ** -0.5)
    (u,) = ds.workloads_of(FUSED_H8)
    assert make_inputs(h8, u, root=fused_imported)["state_indices"].tolist() == [3, 0, 1]


def _fused64(x, weight, window, raw_gate, raw_beta, A_log, dt_bias, S, output_gate, norm_weight, lower_bound, eps):
    """float64 fused_kda_decode of one row in FlashInfer's layout (x [3HD], weight [3, 4, HD], window [3HD, 3] oldest
    first, raw_gate [H, D], dt_bias [H * D], S [H, V, K]) with the kernel's bf16 roundings of the convolution's and the
    recurrence's outputs; returns (o [H, D], S)."""
    H, D = raw_gate.shape
    taps = weight.double().permute(0, 2, 1).reshape(3 * H * D, 4)  # channel p * H * D + c: its taps 0..3
    y = (window.double() * taps[:, :3]).sum(-1) + x.double() * taps[:, 3]
    q, k, v = (y * torch.sigmoid(y)).to(torch.bfloat16).double().view(3, H, D).unbind(0)
    o, S = _recurrence64(q, k, v, raw_gate, A_log, dt_bias, raw_beta, S, 128 ** -0.5, lower_bound)
    o = o.to(torch.bfloat16).double()
    o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + eps) * norm_weight.double() * torch.sigmoid(output_gate.double())
    return o, S


def test_fused_decode_replays_flashinfer_tensors(tmp_path):
    """With the bf16 state pool recorded too: the pool is kept bit for bit, and the imported workload run by our
    reference equals a float64 fused decode computed straight from the recorded tensors in FlashInfer's layout (the
    -1 row zero and nothing written for it)."""
    from safetensors.torch import save_file

    src = tmp_path / "trace"
    shutil.copytree(FIX / "fused", src)
    name, uuid = "fused_kda_decode_h12_d128", "fi-fused-bf16-0001"
    blob = src / "blob" / "workloads" / "kda" / name / f"{name}_{uuid}.safetensors"
    fi = dict(load_file(str(blob)))
    fi["state"] = (0.2 * torch.randn(3, 12, 128, 128, generator=torch.Generator().manual_seed(3))).to(torch.bfloat16)
    save_file(fi, str(blob))
    wfile = src / "workloads" / "kda" / f"{name}.jsonl"
    row = json.loads(wfile.read_text())
    row["workload"]["inputs"]["state"] = {"type": "safetensors", "path": str(blob.relative_to(src)), "tensor_key": "state"}
    wfile.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out"
    assert main(["import-flashinfer", str(src), "--out", str(out)]) == 0
    ds = load_dataset(out)
    d = ds.definitions[FUSED_BF16]
    (w,) = ds.workloads_of(FUSED_BF16)
    inputs = make_inputs(d, w, root=out)
    assert torch.equal(inputs["state_pool"], fi["state"])
    o, conv, pool = compile_reference(d.reference, d.name)(**inputs)
    o64, S64 = _fused64(fi["x"][0], fi["weight"], fi["conv_state"][2], fi["raw_gate"][0, 0], fi["raw_beta"][0, 0],
                        fi["A_log"], fi["dt_bias"], fi["state"][2], fi["output_gate"][0], fi["norm_weight"], -5.0, 1e-5)
    assert (o[0].double() - o64).abs().max() < 3e-2 and not o[1].any()
    assert ((pool[2].double() - S64).abs() <= 2.0 ** -7 * S64.abs() + 1e-3).all()
    assert torch.equal(pool[:2], fi["state"][:2])
    assert torch.equal(conv[2], torch.cat([fi["conv_state"][2][:, 1:], fi["x"][0][:, None]], 1))
    assert torch.equal(conv[:2], fi["conv_state"][:2])


def _fused_workload_problem(tmp_path, name, edit):
    src = tmp_path / "trace"
    shutil.copytree(FIX / "fused", src)
    wfile = src / "workloads" / "kda" / f"{name}.jsonl"
    rows = [json.loads(line) for line in wfile.read_text().splitlines()]
    edit(rows[0]["workload"])
    wfile.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = read_flashinfer_trace(src)
    return [p for p in result.problems if p.startswith(f"{wfile}:1: ")], result


def test_fused_decode_problems_name_the_line_and_field(tmp_path):
    """What the fused_decode family cannot take is refused, naming the line and field: a bf16 pool whose gate no
    _bf16_state fused definition has, a non-negative lower bound, repeated live slots, pools without a slot per row."""
    def bound(value):
        return lambda w: w["inputs"].update(lower_bound={"type": "scalar", "value": value})

    (p,), result = _fused_workload_problem(tmp_path / "a", "fused_kda_decode_h12_d128", bound(-3.0))
    assert p.endswith(": inputs.state: a bfloat16 state pool (not recorded; fused_kda_decode_h12_d128.json declares it), "
                      "and the dataset has no kda_fused_decode_h12_d128_k_last_safe_gate_lbm3_bf16_state: its "
                      f"bfloat16-state fused_decode definitions are {FUSED_BF16}")
    assert FUSED_BF16 not in result.definitions
    (p,), _ = _fused_workload_problem(tmp_path / "b", "fused_kda_decode_h12_d128", bound(0.5))
    assert "inputs.lower_bound: 0.5: fused_kda_decode takes a negative bound" in p
    (p,), _ = _fused_workload_problem(tmp_path / "c", "fused_kda_decode_h8_d128",
                                      lambda w: w["axes"].update(num_slots=3))
    assert "axes.num_slots: 3 slots for 3 rows" in p
    slots = tmp_path / "slots.safetensors"
    from safetensors.torch import save_file

    save_file({"i": torch.tensor([2, 2, 0], dtype=torch.int32)}, str(slots))
    (p,), _ = _fused_workload_problem(tmp_path / "d", "fused_kda_decode_h8_d128", lambda w: w["inputs"].update(
        state_indices={"type": "safetensors", "path": str(slots), "tensor_key": "i"}))
    assert "inputs.state_indices: repeated live slots" in p


@pytest.mark.slow  # a `kda-trace run` of three fused definitions
def test_fused_import_runs(fused_imported, tmp_path):
    records = _reference_run(fused_imported, tmp_path / "run")
    assert len(records) == 3 and all(r["evaluation"]["status"] == "PASSED" for r in records)


def test_fused_fixtures_are_what_flashinfer_writes(tmp_path):
    mk = _fixture_script("make_fused_fixtures.py")
    _assert_definitions_as_stored(mk._make_fixtures(), mk.calls(), "0.7.4", tmp_path)


def test_fused_names_read_a_float32_eps_as_written_and_refuse_a_wrapping_slot():
    import torch

    from kda_trace.import_flashinfer import ImportProblem, _fused_slots, definition_name

    assert definition_name("fused_decode", 12, 12, 128, -5.0, 9.9999997e-06) == "kda_fused_decode_h12_d128_k_last_safe_gate"
    assert definition_name("fused_decode", 12, 12, 128, -5.0, 1e-6).endswith("_eps1em06")
    with pytest.raises(ImportProblem, match="int32"):
        _fused_slots(torch.tensor([1, -4294967295], dtype=torch.int64), "x.jsonl:1", 8)
