#!/usr/bin/env bash
# Session 32 call 3 (H100; carry .whl and .gpu_out): sums_one_launch now the default (call 2). The chunked mode's
# GPU tests with it; launch settings of the one-launch sums kernel on K3 (2 warps, a cap of 168, K-tiles of 16);
# pairs_one_launch (CPU-tested) where the pairs kernel runs, the backward recomputing the chunk matrices
# (bench_backward.py --recompute), on K3 and 32 x 16384.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 170 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -8 | tee "$OUT/pytest_chunked_gpu.txt"
AB_TIMEOUT=70 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 2 "" sums_warps=2 sums_maxnreg=168 sums_bk=16
AB_ARGS=--recompute AB_TIMEOUT=70 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 1 \
    "" pairs_one_launch=True
