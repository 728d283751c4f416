"""Where the chunked backward loses float64 accuracy on a GPU: every gradient's RMS-relative error against float64
autograd (tests/kernels' independent recurrence) for float64 inputs, in the chunked mode (the exact mode as a
control) with one launch setting changed at a time. Under the interpreter every setting reaches about 1e-15; on an H100 (thirty-third
session) the defaults gave dq 1.7e-8 on the strong-gate case. A diagnostic script, not a test.

    python benchmarks/float64_gpu_probe.py [VARIANT ...]     # e.g. defaults mode=exact; all without one

The cause (thirty-third session): the attention scale reached the kernels as a Python float, which Triton types
fp32 (0.7 is 1.7e-8 off in fp32; the default 1/sqrt(K) is a power of two at K = 16 and 64, exact). Since then the
kernels take it as one element in the buffers' dtype (kernels/backward.py `scale_arg`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kernels"))

from test_backward import grad_errors, make  # noqa: E402

from kda_trace.kernels import backward  # noqa: E402
from kda_trace.kernels.options import KDAOptions  # noqa: E402

f64 = torch.float64
VARIANTS = {
    "defaults": {},
    "mode=exact": {"mode": "exact"},
    "chunked_local=tokens": {"chunked_local": "tokens"},
    "diag_blocks=elementwise": {"diag_blocks": "elementwise"},
    "sums_one_launch=False": {"sums_one_launch": False},
    "split_vk_ktiles=False": {"split_vk_ktiles": False},
    "sums_one_anchor=False": {"sums_one_anchor": False},
    "chunked_pass_parallel=False": {"chunked_pass_parallel": False},
    "sums_bk=16": {"sums_bk": 16},
    "split_bk=16": {"split_bk": 16},
}
VK = KDAOptions(state_layout="vk", scale=0.7)
CASES = {  # name: (inputs, initial state used, options)
    "strong gates T=150 K=16 V=24": (lambda: make(1, 150, 1, 1, 16, 24, seed=3, g_low=-8.0, dtype=f64), False,
                                     KDAOptions()),
    # tests/kernels/test_backward_chunked.py's float64_strong_gates case: [V, K] states, scale 0.7
    "the same, [V, K] states, scale 0.7": (lambda: make(1, 150, 1, 1, 16, 24, seed=3, g_low=-8.0, dtype=f64), False,
                                           VK),
    "logsigmoid gates T=200 K=64 V=64 h0": (lambda: make(1, 200, 1, 2, 64, 64, seed=4, dtype=f64), True,
                                            KDAOptions()),
}


def main():
    chosen = sys.argv[1:] or list(VARIANTS)
    for case, (make_x, use_h0, opts) in CASES.items():
        x = make_x()
        print(f"== {case}")
        for name in chosen:
            launch = VARIANTS[name]
            saved = dict(backward.LAUNCH)
            backward.LAUNCH.update({"mode": "chunked", **launch})
            try:
                _, errs = grad_errors(x, opts, use_h0=use_h0)
                print(f"  {name:28s} " + "  ".join(f"d{n} {e:.1e}" for n, e in errs.items()), flush=True)
            except Exception as e:  # noqa: BLE001 - a diagnostic: report and go on
                print(f"  {name:28s} failed: {type(e).__name__}: {e}", flush=True)
            finally:
                backward.LAUNCH.clear()
                backward.LAUNCH.update(saved)


if __name__ == "__main__":
    main()
