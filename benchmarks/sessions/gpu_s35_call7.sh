#!/usr/bin/env bash
# Session 35 call 7 (H100; carry .whl and .gpu_out): more of the training forward's launch on K3 (warps and
# stages of the W/U, intra and solve kernels; tuned so far for inference only), two alternating rounds.
source benchmarks/gpu_env.sh
AB_TIMEOUT=100 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 2 "" fwd.wu_warps=8 fwd.intra_warps=4 \
    fwd.solve_warps=2 fwd.wu_stages=1
