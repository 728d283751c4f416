"""How the GPU's tf32 dot (tl.dot with input_precision="tf32") treats an fp32 operand's low 13 mantissa bits: round
to nearest (ties away, as cvt.rna.tf32) or truncate. A diagnostic script, not a test: it prints x @ I for values
between tf32 neighbours; kernels/chunk.py's interpreter emulation (`_tf32`) should do the same.

    python benchmarks/tf32_rounding_probe.py
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _times_identity(x, y, N: tl.constexpr):
    o = tl.arange(0, N)
    a = tl.load(x + o[:, None] * N + o[None, :])
    eye = tl.where(o[:, None] == o[None, :], 1.0, 0.0)
    tl.store(y + o[:, None] * N + o[None, :], tl.dot(a, eye, input_precision="tf32"))


def main():
    ulp = 2.0 ** -10  # tf32's spacing in [1, 2)
    fractions = [0.25, 0.5, 0.75, 0.99]
    vals = [1 + f * ulp for f in fractions] + [-(1 + f * ulp) for f in fractions]
    a = torch.zeros(16, 16, device="cuda")
    a[0, :len(vals)] = torch.tensor(vals)
    y = torch.empty_like(a)
    _times_identity[(1,)](a, y, N=16)
    print(f"device {torch.cuda.get_device_name()}, triton {triton.__version__}: x -> tf32 dot's x @ I, in ulps above 1")
    for v, r in zip(vals, y[0, :len(vals)].tolist()):
        print(f"  {v:+.9f} ({(abs(v) - 1) / ulp:.2f} ulp) -> {r:+.9f} ({(abs(r) - 1) / ulp:.2f} ulp)")
    up = [(abs(r) - 1) / ulp for r in y[0, :len(vals)].tolist()]
    kind = "truncates" if max(up) == 0 else "rounds to nearest" if up[2] == 1 and up[0] == 0 else "other"
    print(f"tf32 operand conversion: {kind}")


if __name__ == "__main__":
    main()
