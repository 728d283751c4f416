#!/usr/bin/env bash
# Session 33 call 3 (H100; carry .whl and .gpu_out): split_vk_ktiles now the default. On K3, two alternating
# rounds: the default against `_local_vk_kernel` capped at 168 registers (lighter with Y_k given: 234 uncapped, two
# programs per SM) and the sums kernel uncapped (2 warps); then one backward's kernels (torch.profiler).
source benchmarks/gpu_env.sh
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 2 "" split_vk_maxnreg=168 sums_maxnreg=0
timeout -s INT -k 10 120 python3 benchmarks/bench_backward.py --no-fla --shapes h96_dense_1x8192_safe_l2 --parts 2>&1 \
    | grep -v -i warn | tee "$OUT/parts.txt"
