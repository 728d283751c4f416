#!/usr/bin/env bash
# Queued by the twenty-eighth session for the next device time (H100; carry .whl and .gpu_out), about 5 min,
# untimed so far. The runner on kda_bwd_h32 (call 8) timed some small workloads slower than the twenty-seventh
# session's kernels (2 x 130 tokens 1.24 -> 1.96 ms, 1 x 1024 1.75 -> 1.91; others faster, 4096 tokens 4.21 ->
# 3.66; the smallest, host-bound, moved both ways): was it this session's `_local_vk_kernel` tiles (32 x 32 on 4
# warps: each program walks four times the tiles of 64 x 64 on 8 warps, which matters where there are fewer
# programs than the GPU holds) or the register caps, or machine noise? Two rounds on small shapes and 4096 tokens.
source benchmarks/gpu_env.sh
AB_TIMEOUT=100 bash benchmarks/ab_backward.sh h32_dense_2x130,h32_dense_1x1024,h32_dense_1x4096 2 "" \
    split_vk_warps=8,split_bv=64,split_bk=64 sums_maxnreg=0,prep_operands_maxnreg=0
