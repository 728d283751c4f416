#!/usr/bin/env bash
# Session 31 call 4 (H100; carry .whl and .gpu_out): the session's final code (losers removed; keep_states off by
# default). The autograd tests on the GPU (the kept-states test among them) and the chunked mode's GPU tests; then
# ours with keep_states=True against fla 0.6.0 on K3 in one process, and one more A/B round of the default against it.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest tests/kernels/test_autograd.py -o addopts= -q -p no:cacheprovider -rfEs \
    -k "kept or norm_factors" 2>&1 | tail -8 | tee "$OUT/pytest_autograd_gpu.txt"
timeout -s INT -k 10 170 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -8 | tee "$OUT/pytest_chunked_gpu.txt"
timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --shapes h96_dense_1x8192_safe_l2 \
    --launch keep_states=True 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
AB_TIMEOUT=50 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 1 "" keep_states=True
