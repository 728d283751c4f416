"""Driver for Nsight Compute on our chunked forward: a few calls of one shape, nothing else on the GPU.

    ncu --clock-control none --kernel-name regex:'_intra_chunk_kernel|_state_kernel' --launch-skip 4 \
        --launch-count 2 --section SpeedOfLight --section WarpStateStats ... python3 benchmarks/ncu_chunk.py SHAPE

SHAPE is one of bench_chunk.py's (default h32_dense_1x16384); the first calls compile the kernels (skip them).
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

from bench_chunk import SHAPES, make_inputs, run_ours  # noqa: E402

name = sys.argv[1] if len(sys.argv) > 1 else "h32_dense_1x16384"
H, lens, mode = SHAPES[name]
x = make_inputs(H, lens, mode)
for _ in range(4):
    run_ours(x, mode)
torch.cuda.synchronize()
