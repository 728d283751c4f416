"""benchmarks/row_truth.py, the float64 check behind kda_bwd_fused_h96's gate bounds, on the CPU: the definition's
reference and our kernels against float64 autograd (two independent sides that must agree), on the smallest
workload (8 tokens, 96 heads)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow  # a benchmark script run whole (45 s on 2 busy CPU cores)
def test_row_truth_reports_every_output_against_float64():
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "row_truth.py"), "--name",
                          "kda_bwd_fused_h96_d128_v_last_safe_gate", "--workload", "f6597174", "--device", "cpu",
                          "--solutions", "reference,triton"], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    outputs = {"dq", "dk", "dv", "dg_raw", "dA_log", "ddt_bias", "db", "dh0"}
    for who, against in (("reference", "float64"), ("triton", "float64"), ("triton", "reference")):
        got = {r["output"]: r for r in rows if r["solution"] == who and r["against"] == against}
        assert set(got) == outputs, (who, against, sorted(got))
        # bf16 outputs: one rounding (2^-9 relative) per element; the bound is 0.1 (0.5 for dg_raw)
        assert all(r["max_row_rel_error"] < 1e-2 and r["rows_over_bound"] == 0 for r in got.values()), got
