#!/usr/bin/env bash
# Session 40 call 6 (H200, call 5's machine; carry .whl and .gpu_out): per-kernel times (torch.profiler) of ours and
# fla on 32 x 16384 and K3, where the H200's ratios (call 5: 1.21, 1.11) fell below the H100's (1.29, 1.27).
source benchmarks/gpu_env.sh
for S in h32_dense_1x16384 h96_dense_1x8192_safe_l2; do
    timeout -s INT -k 10 150 python3 benchmarks/bench_chunk.py --no-speed --profile $S --profile-fla $S \
        2>&1 | grep -v -i warn | tee -a "$OUT/profile.txt"
done
