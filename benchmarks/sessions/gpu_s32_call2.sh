#!/usr/bin/env bash
# Session 32 call 2 (H100; carry .whl and .gpu_out): LAUNCH["sums_one_launch"] (CPU-tested: the same bits), the
# sums kernel's four row blocks in one launch, an item's blocks as neighbouring work (its gates, q and k then from
# L2), persistent (8 per SM) and one program per (item, block); A/B on K3 against the session start's tree and
# the scratch-free default (call 1); one round at 32 x 16384; per-kernel times with it.
source benchmarks/gpu_env.sh
AB_TIMEOUT=70 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 2 tree:.gpu_out/base_s32 "" \
    sums_one_launch=True sums_one_launch=True,programs=100000000
AB_TIMEOUT=70 bash benchmarks/ab_backward.sh h32_dense_1x16384 1 "" sums_one_launch=True \
    sums_one_launch=True,programs=100000000
timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-fla --parts --launch sums_one_launch=True \
    --shapes h96_dense_1x8192_safe_l2 2>&1 | grep -v -i warn | head -12 | tee -a "$OUT/parts.txt"
