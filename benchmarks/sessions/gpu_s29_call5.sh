#!/usr/bin/env bash
# Twenty-ninth session, call 5 (H100; carry .whl and .gpu_out): the new default (the sums kernel's diagonal blocks
# in tf32_rn): ours against fla 0.6.0 on the three training shapes in one process, then the chunked mode's GPU
# tests.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 330 python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
timeout -s INT -k 10 $((585 - SECONDS)) python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu \
    -q -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/pytest_chunked_gpu.txt"
