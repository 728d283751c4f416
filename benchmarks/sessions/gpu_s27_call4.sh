#!/usr/bin/env bash
# Twenty-seventh session, H100 (carry .whl and .gpu_out), about 7 min: launch settings of the bandwidth-bound
# kernels around the sums, two rounds on 32 x 16384 (the defaults first): `_local_k_kernel` on K-tiles of 64 with
# 8 warps, with 8 warps on 32; the prep operands kernel with 8 warps, on V-tiles of 32.
source benchmarks/gpu_env.sh
AB_TIMEOUT=150 bash benchmarks/ab_backward.sh h32_dense_1x16384 2 "" split_k_bk=64,split_k_warps=8 split_k_warps=8 \
    prep_operands_warps=8 prep_bv=32
