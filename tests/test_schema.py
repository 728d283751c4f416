"""The models, their checked-in JSON Schemas, and FlashInfer-Bench compatibility of our files."""

from pathlib import Path

import pytest

from kda_trace.schema_files import schema_texts
from kda_trace.dataset import load_dataset, schema_problems
from kda_trace.schema import Definition, Workload

REPO = Path(__file__).resolve().parent.parent


def test_checked_in_schemas_match_the_models():
    for name, text in schema_texts().items():
        path = REPO / "schemas" / name
        assert path.exists(), f"{path} missing: run `kda-trace schemas`"
        assert path.read_text() == text, f"{path} drifted from the models: run `kda-trace schemas` and commit"


def test_jsonschema_errors_point_at_json_paths():
    bad = {"uuid": "u", "axes": {"n": -1}, "inputs": {"x": {"type": "weird"}}}
    problems = schema_problems("Workload", bad)
    assert any(p.startswith("field axes.n:") for p in problems), problems
    assert any(p.startswith("field inputs.x") for p in problems), problems


def test_zero_length_sequence_is_rejected():
    with pytest.raises(ValueError, match="sequence 1 has length 0"):
        Workload(uuid="u", axes={}, inputs={}, seq_lens=[3, 0, 2])


def test_generator_none_needs_optional_input():
    with pytest.raises(ValueError, match="optional"):
        Definition(name="d", op_type="t", axes={"n": {"type": "var"}},
                   inputs={"x": {"shape": ["n"], "dtype": "float32", "generator": {"kind": "none"}}},
                   outputs={"y": {"shape": ["n"], "dtype": "float32"}}, reference="def run(x):\n    return x\n")


def test_safetensors_path_must_stay_inside_root():
    for path in ("../secret.safetensors", "/etc/passwd", "a/../../b"):
        with pytest.raises(ValueError, match="dataset root"):
            Workload(uuid="u", axes={}, inputs={"x": {"type": "safetensors", "path": path, "tensor_key": "x"}})


def _dataset_files():
    ds = load_dataset(REPO)
    defs = [REPO / f for f in ds.definition_files.values()]
    wls = sorted((REPO / "workloads").glob("*/*.jsonl"))
    return defs, wls


def test_repo_files_load_with_flashinfer_bench_models():
    fib = pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench is not installed")
    defs, wls = _dataset_files()
    if not defs:
        pytest.skip("the repository has no definitions yet")
    names = set()
    for path in defs:
        d = fib.Definition.model_validate_json(path.read_text())
        names.add(d.name)
        assert d.name == path.stem
    for path in wls:
        for line in path.read_text().splitlines():
            if line.strip():
                w = fib.Workload.model_validate_json(line)
                assert w.uuid
    assert names


def test_trace_records_load_with_flashinfer_bench_models():
    """A record as the runner writes it now (environment with digests included) reads as a FlashInfer-Bench
    Trace, and so does a checked-in GPU record."""
    fib = pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench is not installed")
    from kda_trace import environment
    from kda_trace.schema import Trace

    path = REPO / "benchmarks" / "results" / "2026-11-22-h100" / "dataset-run" / "traces" / "kda" / "kda_decode_h8_d128_k_last.jsonl"
    line = path.read_text().splitlines()[0]
    fib.Trace.model_validate_json(line)
    t = Trace.model_validate_json(line)
    t.evaluation.environment = environment.capture("cpu", 1, REPO)
    back = fib.Trace.model_validate_json(t.model_dump_json())  # as runner.py writes it
    assert back.evaluation.environment.hardware == t.evaluation.environment.hardware
