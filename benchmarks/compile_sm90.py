"""Compile our training kernels (kernels/backward.py, kernels/gate.py) for sm_90 without a GPU: Triton's front
end, its NVIDIA passes and ptxas. Catches what the interpreter accepts but the compiler refuses, and prints
ptxas's register and spill report for the backward's launch settings.

    python benchmarks/compile_sm90.py [--spills]

Run it without TRITON_INTERPRET (the kernels must be compiled, not interpreted). Exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kda_trace.kernels import backward, gate  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


def compile_kernel(fn, sig: dict, consts: dict, warps: int):
    sig = dict(sig)
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
    return triton.compile(ASTSource(fn, sig, consts), target=TARGET, options={"num_warps": warps})


def backward_signature(acc: str) -> dict:
    sig = {n: "*bf16" for n in ("q", "k", "v", "beta", "do")}
    sig.update({n: f"*{acc}" for n in ("g", "h0", "dht", "o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0",
                                        "checkpoints", "scratch")})
    sig.update(cu_seqlens="*i64", chunk_offsets="*i64", scale="fp32")
    return sig


def ptxas_report(kernel) -> list[str]:
    """ptxas -v lines about registers and spills (the newest ptxas Triton ships, which reads its PTX)."""
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(kernel.asm["ptx"])
    for exe in ("ptxas-blackwell", "ptxas"):
        path = os.path.join(bindir, exe)
        if os.path.exists(path):
            out = subprocess.run([path, "-v", "--gpu-name=sm_90a", f.name, "-o", os.devnull],
                                 capture_output=True, text=True)
            if out.returncode == 0:
                return [line.strip() for line in out.stderr.splitlines() if "spill" in line or "registers" in line]
    return ["(no ptxas could read the PTX)"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spills", action="store_true", help="ptxas register / spill report per launch setting")
    a = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: the kernels must be compiled")
        return 1
    cases = []
    for acc in ("fp32", "fp64"):
        for fwd in (False, True):
            cases.append(("backward", acc, fwd, 128, 128, 16, 4, 16))
    cases += [("backward", "fp32", False, 100, 60, 16, 4, 16), ("backward", "fp32", False, 256, 256, 16, 8, 64)]
    if a.spills:
        cases += [("backward", "fp32", False, 128, 128, bv, w, 16) for bv, w in ((32, 4), (32, 8), (64, 8))]
    for _, acc, fwd, K, V, bv, warps, seg in cases:
        consts = dict(H=8, HV=16, K=K, V=V, BK=triton.next_power_of_2(K), BV=bv, CT=64, SEG=seg, USE_H0=True,
                      USE_DHT=True, FORWARD=fwd)
        k = compile_kernel(backward._kda_bwd_kernel, backward_signature(acc), consts, warps)
        extra = ptxas_report(k) if a.spills and acc == "fp32" and not fwd else []
        print(f"backward {acc} forward={fwd} K={K} V={V} BV={bv} warps={warps} seg={seg}: ok", *extra)
    for code in (1, 2):
        sig = {"g_raw": "*bf16", "A_log": "*fp32", "dt_bias": "*fp32", "g": "*fp32", "n_rows": "i64",
               "lower_bound": "fp32"}
        compile_kernel(gate._gate_kernel, sig, dict(H=32, K=100, BR=32, BK=128, GATE=code), 4)
        print(f"gate {code}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
