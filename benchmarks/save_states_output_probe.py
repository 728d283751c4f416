"""How far `kda_chunk(..., save_states=True)` moves o and the final state (the forward then computes U and W in tf32
from the fp32 X, for the backward's kept V_new and W, instead of in bf16), and which is closer to float64. bf16 q/k/v, L2 norm in
the op, 200 tokens, 2 heads, K = V = 32; runs anywhere (`TRITON_INTERPRET=1` without a GPU):

    TRITON_INTERPRET=1 python benchmarks/save_states_output_probe.py
"""

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", p) for p in ("", "tests", "tests/kernels")]

from kda_trace.kernels.chunk import kda_chunk  # noqa: E402
from kda_trace.kernels.options import KDAOptions  # noqa: E402
from kda_trace.platform import default_device  # noqa: E402
from kernel_ground_truth import ref_kda, rms_rel  # noqa: E402
from test_chunk import make  # noqa: E402


def main():
    dev = default_device()
    x = make(1, 200, 2, 2, 32, 32, seed=5)
    x = {n: (t.bfloat16() if n in ("q", "k", "v") else t).to(dev) for n, t in x.items()}
    opts = KDAOptions(output_final_state=True, use_qk_l2norm=True)
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], opts)
    o, ht = kda_chunk(*args, initial_state=x["h0"])
    o_s, ht_s = kda_chunk(*args, initial_state=x["h0"], saved={}, save_states=True)
    f = lambda t: t.double().cpu()  # noqa: E731
    o_ref, h_ref = ref_kda(f(x["q"]), f(x["k"]), f(x["v"]), f(x["g"]), f(x["beta"]), 32 ** -0.5, f(x["h0"]), None,
                           True)
    print(f"o: save_states against without {rms_rel(o_s.cpu(), o.cpu()):.2e}; against float64 "
          f"{rms_rel(o.cpu(), o_ref):.2e} without, {rms_rel(o_s.cpu(), o_ref):.2e} with")
    print(f"final state against float64: {rms_rel(ht.cpu(), h_ref):.2e} without, {rms_rel(ht_s.cpu(), h_ref):.2e} with")


if __name__ == "__main__":
    main()
