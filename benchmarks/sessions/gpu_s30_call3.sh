#!/usr/bin/env bash
# Session 30 call 3 (H100; carry .whl and .gpu_out): after call 2 (3c as one program per work item: a small gain;
# on K-tiles of 16 K3's backward 14.70 -> 14.46 ms, 32 x 16384 8.77 -> 8.82), 3c's tile and warps, and the sums
# kernel without persistent programs (LAUNCH["programs"] past its work items: one program per item, the persistent
# loop run once) or with 16 per SM (2112 on 132 SMs). Two alternating rounds on K3 and 32 x 16384.
source benchmarks/gpu_env.sh
AB_TIMEOUT=110 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" split_k_bk=16 \
    split_k_bk=16,split_k_warps=2 split_k_bk=16,split_k_warps=8 split_k_bk=16,programs=100000000 \
    split_k_bk=16,programs=2112
