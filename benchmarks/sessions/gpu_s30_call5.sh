#!/usr/bin/env bash
# Session 30 call 5 (H100; carry .whl and .gpu_out): launch settings after 3c's new tiles (16 columns, 8 warps):
# the sums kernel on 8 warps (at its default cap of 128: two programs per SM, 16 warps, as four of 4 now), the prep
# operands kernel capped at 128 (four per SM; 168 now: three), 3c on K-tiles of 8 at 8 and 4 warps. Two
# alternating rounds on K3 and 32 x 16384.
source benchmarks/gpu_env.sh
AB_TIMEOUT=110 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" sums_warps=8 \
    prep_operands_maxnreg=128 split_k_bk=8 split_k_bk=8,split_k_warps=4
