#!/usr/bin/env bash
# Session 34 call 6 (H100; carry .whl and .gpu_out): where K3's time goes with keep_states the default: one forward
# (with what it keeps) and one backward, kernel by kernel, ours and fla's; then the chunked backward's GPU tests and
# the chunk kernel's.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_backward.py --parts --shapes h96_dense_1x8192_safe_l2 2>&1 \
    | grep -v -i warn | tee "$OUT/parts.txt"
timeout -s INT -k 10 300 python3 -m pytest tests/kernels/test_backward_chunked.py tests/kernels/test_chunk.py -o addopts= \
    -m gpu -q -p no:cacheprovider -rfEs 2>&1 | tail -8 | tee "$OUT/pytest_gpu.txt"
