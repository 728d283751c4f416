#!/usr/bin/env bash
# Session 30 call 6 (H100; carry .whl and .gpu_out): the session's defaults (sums_one_anchor on, 3c one program per
# item on K-tiles of 16 and 8 warps): ours against fla 0.6.0 on the three training shapes in one process; the
# gradients' errors against float64 (ours); the chunked mode's GPU tests.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 280 python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy 2>&1 \
    | grep -v -i warn | grep -v Variable | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 $((520 - SECONDS)) python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu \
    -q -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/pytest_chunked_gpu.txt"
