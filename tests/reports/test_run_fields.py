"""What `kda-trace run` writes for this issue: the device and project in each record, `--baseline`, peaks
given on the command line, and (on a GPU, pytest -m gpu) the speed-of-light fraction."""

import json
from pathlib import Path

import pytest

from kda_trace import __version__, platform, roofline
from kda_trace.cli import main

DS = str(Path(__file__).resolve().parents[1] / "runner" / "fixtures" / "ds")


def records(out: Path, definition: str):
    return [json.loads(line) for line in (out / "traces" / "toy" / f"{definition}.jsonl").read_text().splitlines()]


@pytest.mark.slow  # a `kda-trace run` of its own
def test_cpu_records_name_the_device_and_project_and_the_baseline_is_reported(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--solution", "reference",
                 "--baseline", "reference", "--out", str(out)]) == 0
    env = records(out, "toy_scan")[0]["evaluation"]["environment"]
    assert env["device"] == "cpu" and env["device_uuid"] is None and env["project_version"] == __version__
    assert env.get("peaks") is None  # the CPU has no roofline
    perf = records(out, "toy_scan")[0]["evaluation"]["performance"]
    assert perf["sol_fraction"] is None and perf["tbps"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["baseline"] == "reference"
    assert "vs reference" in (out / "summary.md").read_text()


def test_run_refuses_a_baseline_that_is_not_a_solution_of_the_run(tmp_path, capsys):
    assert main(["run", "--dataset", DS, "--definition", "toy_scan", "--solution", "reference",
                 "--baseline", "fla", "--out", str(tmp_path)]) == 2
    assert "--baseline 'fla'" in capsys.readouterr().err
    assert main(["run", "--dataset", DS, "--definition", "toy_scan", "--solution", "reference",
                 "--peak-tbps", "0", "--out", str(tmp_path)]) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not platform.has_cuda(), reason="needs a CUDA device")
def test_gpu_records_carry_device_uuid_peaks_and_sol(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv(roofline.ENV_TBPS, "1")  # so that the value --peak-tbps sets is undone after the test
    out = tmp_path / "run"
    assert main(["run", "--definition", "kda_decode_h32_d128_k_last", "--solution", "triton", "--size", "smoke",
                 "--peak-tbps", "3.0", "--out", str(out)]) == 0
    recs = [json.loads(x) for x in (out / "traces" / "kda" / "kda_decode_h32_d128_k_last.jsonl").read_text().splitlines()]
    for rec in recs:
        env, perf = rec["evaluation"]["environment"], rec["evaluation"]["performance"]
        assert env["device"].startswith("cuda:") and env["device_uuid"].startswith("GPU-")
        assert env["peaks"]["tbps"] == 3.0 and env["peaks"]["source"].startswith("user")
        if env["peaks"]["tflops"] is not None:  # a device in the table
            assert perf["sol_fraction"] > 0 and perf["sol_bound"] in ("memory", "compute")
            assert perf["sol_fraction"] == pytest.approx(max(perf["tbps"] / 3.0, perf["tflops"] / env["peaks"]["tflops"]))
