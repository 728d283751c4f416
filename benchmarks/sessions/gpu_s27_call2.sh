#!/usr/bin/env bash
# Twenty-seventh session, H100 (carry .whl and .gpu_out with .gpu_out/old_d6c), about 6 min: call 1's fused
# `_local_sums_kernel` took 7.0 ms against 4.2 + 1.3 apart. Is it occupancy (255 registers, 4 warps)? Two rounds on
# 32 x 16384: the fused kernel as is, with 8 warps, with K-tiles of 16; d6c7a00 beside them.
source benchmarks/gpu_env.sh
AB_TIMEOUT=150 bash benchmarks/ab_backward.sh h32_dense_1x16384 2 "" sums_warps=8 sums_bk=16 tree:.gpu_out/old_d6c
