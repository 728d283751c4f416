#!/usr/bin/env bash
# Session 32 call 1 (H100; carry .whl and .gpu_out): the sums and pairs kernels read the gates where they are
# (masked) instead of copying each item's gates through a per-program scratch between two barriers (CPU-tested).
# The chunked mode's GPU tests; A/B on K3 against the session start's tree (.gpu_out/base_s32 = git archive of
# 0c64df7), also with one program per sums item (programs=1e8); one round at 32 x 16384; per-kernel times.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 170 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -8 | tee "$OUT/pytest_chunked_gpu.txt"
AB_TIMEOUT=70 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 2 tree:.gpu_out/base_s32 "" programs=100000000
AB_TIMEOUT=70 bash benchmarks/ab_backward.sh h32_dense_1x16384 1 tree:.gpu_out/base_s32 ""
timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-fla --parts \
    --shapes h96_dense_1x8192_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/parts.txt"
