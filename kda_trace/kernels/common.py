"""What our two KDA kernels (recurrent.py, chunk.py) share: the gate and beta formulas inside a kernel, their
constexpr codes, and the host-side checks of the common inputs and of packed sequence offsets. Defines
@triton.jit functions, so it is imported (by those modules) only after the caller chose compiled or
interpreted Triton."""

from __future__ import annotations

import triton
import triton.language as tl

GATE_CODES = {"precomputed": 0, "unbounded": 1, "safe": 2}
BETA_CODES = {"prob": 0, "logits": 1, "logits_x2": 2}


@triton.jit
def log_decay(x, a, lower_bound, GATE: tl.constexpr):
    """The log decay from x = g_raw + dt_bias and a = exp(A_log): -a softplus(x) (GATE 1, unbounded) or
    lower_bound sigmoid(a x) (GATE 2, safe)."""
    if GATE == 1:
        # softplus(x) = x above 20; the clamp keeps exp finite in the branch not taken
        return -a * tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    else:
        return lower_bound * tl.sigmoid(a * x)


@triton.jit
def beta_value(b, BETA: tl.constexpr):
    """beta as given (BETA 0), sigmoid(b) (1) or 2 sigmoid(b) (2)."""
    if BETA == 1:
        b = tl.sigmoid(b)
    elif BETA == 2:
        b = 2.0 * tl.sigmoid(b)
    return b


def check_inputs(q, k, v, g, beta, opts, A_log, dt_bias, cu_seqlens) -> int:
    """Check the shapes both kernels take (q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K];
    beta [B, T, HV]; B == 1 with cu_seqlens) and the gate's parameters; return the number of sequences."""
    B, T, H, K = q.shape
    HV = v.shape[2]
    if k.shape != q.shape or v.shape[:2] != (B, T) or g.shape != (B, T, HV, K) or beta.shape != (B, T, HV):
        raise ValueError(
            f"shape mismatch: q {tuple(q.shape)} k {tuple(k.shape)} v {tuple(v.shape)} g {tuple(g.shape)} "
            f"beta {tuple(beta.shape)}; expected k like q, v [B, T, HV, V], g [B, T, HV, K], beta [B, T, HV]")
    if HV % H:
        raise ValueError(f"value heads ({HV}) must be a multiple of q/k heads ({H})")
    if opts.gate != "precomputed" and (A_log is None or dt_bias is None):
        raise ValueError(f"gate {opts.gate!r} needs A_log and dt_bias")
    if cu_seqlens is None:
        return B
    if B != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1, got {B}")
    return cu_seqlens.shape[0] - 1


def sequence_lengths(offsets: list[int], total: int) -> list[int]:
    """The sequence lengths of a packed batch from its cu_seqlens values (read to the host), checked: the
    offsets run from 0 to `total` tokens and every sequence has at least one token."""
    if len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != total:
        raise ValueError(f"cu_seqlens must run from 0 to {total} tokens, got {offsets[:1]}..{offsets[-1:]}")
    lens = [e - s for s, e in zip(offsets, offsets[1:])]
    for i, n in enumerate(lens):
        if n <= 0:
            raise ValueError(f"cu_seqlens holds a zero-length (or decreasing) sequence {i} (length {n}); every "
                             f"sequence needs at least one token")
    return lens


def register_cap(maxnreg, default: int = 0) -> dict:
    """A launch's `maxnreg` keyword (registers per thread ptxas may use; fewer: more programs resident per SM,
    perhaps spills) from a LAUNCH setting: `default` for None, nothing for 0 (ptxas's choice). The interpreter
    ignores it."""
    cap = default if maxnreg is None else maxnreg
    return {"maxnreg": int(cap)} if cap else {}


PRODUCT_PRECISIONS = ("tf32", "tf32_rn", "tf32x3", "ieee", "bf16", "bf16_split_a")


def dot_precision(prec: str, interpreted: bool, allowed: tuple[str, ...] = PRODUCT_PRECISIONS) -> str:
    """The PREC a product helper takes for a launch setting's precision (one of `allowed`): "bf16..." becomes
    "bf16..._interpreted" under the interpreter, and "tf32_rn" "tf32", since the interpreter's tf32 products are
    fp32 (rounding the operands there would make it the one fp32 product that is not)."""
    if prec not in allowed:
        raise ValueError(f"a product precision must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {prec!r}")
    if interpreted and prec == "tf32_rn":
        return "tf32"
    return prec + "_interpreted" if prec.startswith("bf16") and interpreted else prec
