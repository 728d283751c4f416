"""A standalone check of one Triton product on this GPU: acc + a @ b^T for a, b [64, BI] fp32 tiles, b^T taken
with tl.trans in registers (as kernels/backward_chunked.py's `_local_vk_kernel` forms Y_k (beta Kb)^T), by inner
width BI, precision and warps, against float64. A right tf32 product is about 1e-3 off; the twenty-fifth session
found the kernel's product wrong at BI = 16 in tf32 (H100, Triton 3.6). `python benchmarks/probe_narrow_dot.py`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _narrow_dot_kernel(a, b, c, out, BI: tl.constexpr, PREC: tl.constexpr, TRANS: tl.constexpr):
    o_t = tl.arange(0, 64)
    o_i = tl.arange(0, BI)
    b_a = tl.load(a + o_t[:, None] * BI + o_i[None, :])
    b_c = tl.load(c + o_t[:, None] * 64 + o_t[None, :])
    if TRANS:
        b_bt = tl.trans(tl.load(b + o_t[:, None] * BI + o_i[None, :]))
    else:
        b_bt = tl.load(b + o_t[None, :] * BI + o_i[:, None])  # the same [BI, 64] tile, loaded transposed
    if PREC == "bf16":
        b_c += tl.dot(b_a.to(tl.bfloat16), b_bt.to(tl.bfloat16))
    else:
        b_c += tl.dot(b_a, b_bt, input_precision=PREC)
    tl.store(out + o_t[:, None] * 64 + o_t[None, :], b_c)


def main():
    gen = torch.Generator().manual_seed(0)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    for bi in (16, 32):
        a, b = torch.randn(64, bi, generator=gen), torch.randn(64, bi, generator=gen)
        c = torch.randn(64, 64, generator=gen)
        ref = c.double() + a.double() @ b.double().T
        for prec in ("ieee", "tf32", "bf16"):
            for trans in (True, False):
                for warps in (4, 8):
                    out = torch.empty(64, 64, device="cuda")
                    _narrow_dot_kernel[(1,)](a.cuda(), b.cuda(), c.cuda(), out, BI=bi, PREC=prec, TRANS=trans,
                                             num_warps=warps)
                    err = float((out.cpu().double() - ref).norm() / ref.norm())
                    print(f"BI {bi:2d} {prec:4s} {'tl.trans' if trans else 'loaded^T'} {warps} warps: {err:.1e}",
                          flush=True)


if __name__ == "__main__":
    main()
