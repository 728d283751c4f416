#!/usr/bin/env bash
# Session 35 call 1 (H100; carry .whl and .gpu_out): the training forward's launch on K3 (kernels/chunk.py LAUNCH
# through bench_backward.py's fwd. keys; tuned so far for inference only): W/U and state-pass tiles, two
# alternating rounds, fwd+bwd / bwd ms.
source benchmarks/gpu_env.sh
AB_TIMEOUT=130 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 2 "" fwd.wu_bv=32 fwd.wu_bk=32 \
    fwd.state_bv=32
