"""One piece of the training path on fp32 inputs at test_autograd.py's fp32 shape (T = 70, H = 1, HV = 2, K = 12,
V = 10, L2 norm, gate, beta logits), run alone so that a fault names its kernel (run it with
CUDA_LAUNCH_BLOCKING=1): `python benchmarks/probe_training_fp32.py PIECE [KEY=VALUE ...]` with PIECE one of
forward, l2, gate_backward, backward_raw, autograd; KEY=VALUE sets kernels/backward.py LAUNCH keys. Prints
"PIECE ok" or the error."""

from __future__ import annotations

import sys
import traceback

import torch

from kda_trace.kernels import backward, option_grads
from kda_trace.kernels.autograd import kda_autograd, kda_backward_raw
from kda_trace.kernels.chunk import kda_chunk
from kda_trace.kernels.options import KDAOptions


def main():
    piece = sys.argv[1]
    for item in sys.argv[2:]:
        key, _, val = item.partition("=")
        backward.LAUNCH[key] = val
    gen = torch.Generator().manual_seed(2)
    r = lambda *s: torch.randn(*s, generator=gen).cuda()  # noqa: E731
    T, H, HV, K, V = 70, 1, 2, 12, 10
    x = dict(q=r(1, T, H, K), k=r(1, T, H, K), v=r(1, T, HV, V), g=r(1, T, HV, K), beta=r(1, T, HV),
             A_log=r(HV) * 0.5, dt_bias=r(HV, K), h0=r(1, HV, K, V) * 0.3)
    opts = KDAOptions(use_qk_l2norm=True, gate=sys.argv[-1] if sys.argv[-1] in ("safe", "unbounded") else "unbounded",
                      beta="logits", output_final_state=True)
    do, dht = r(1, T, HV, V) * 0.1, r(1, HV, K, V) * 0.1
    try:
        if piece == "forward":
            kda_chunk(x["q"], x["k"], x["v"], x["g"], x["beta"], opts, A_log=x["A_log"], dt_bias=x["dt_bias"],
                      initial_state=x["h0"])
        elif piece == "l2":
            option_grads.l2_normalize_backward(x["q"], option_grads.l2_normalize(x["q"], torch.float32))
        elif piece == "gate_backward":
            option_grads.gate_backward(x["g"], x["A_log"], x["dt_bias"], r(1, T, HV, K), "unbounded")
        elif piece == "backward_raw":
            kda_backward_raw(x["q"], x["k"], x["v"], x["g"], x["beta"], do, dht, opts, A_log=x["A_log"],
                             dt_bias=x["dt_bias"], initial_state=x["h0"])
        elif piece == "autograd":
            leaves = {n: t.clone().requires_grad_() for n, t in x.items()}
            o, ht = kda_autograd(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"],
                                 initial_state=leaves["h0"], use_qk_l2norm=True, gate="unbounded",
                                 A_log=leaves["A_log"], dt_bias=leaves["dt_bias"], beta_kind="logits")
            ((o * do).sum() + (ht * dht).sum()).backward()
        torch.cuda.synchronize()
        print(piece, sys.argv[2:], "ok", flush=True)
    except Exception:  # noqa: BLE001 -- the probe reports
        print(piece, sys.argv[2:], "FAILED", flush=True)
        traceback.print_exc(limit=-6)


if __name__ == "__main__":
    main()
