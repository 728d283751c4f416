#!/usr/bin/env bash
# Session 36 call 6 (asked for an H200, ran on the warm H100; carry .whl and .gpu_out with fla's autotuning results): where K3's training time goes
# on the H200, where call 3 found fla 8% ahead (the H100: parity): ours and fla's kernels, one forward and one
# backward each (torch.profiler); then the inference forward on K3 and 32 x 16384 against fla.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_backward.py --parts --shapes h96_dense_1x8192_safe_l2 2>&1 \
    | grep -v -i warn | tee "$OUT/parts.txt"
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --shapes h96_dense_1x8192_safe_l2,h32_dense_1x16384 2>&1 \
    | grep -v -i warn | tee "$OUT/chunk.txt"
