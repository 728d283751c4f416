#!/usr/bin/env bash
# Session 32 call 7 (H100, warm; the last device time): split_vk_ktiles again on K3 and at 32 x 16384, and with
# `_local_kt_kernel` on 8 warps, one round.
source benchmarks/gpu_env.sh
AB_TIMEOUT=60 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 1 "" split_vk_ktiles=True \
    split_vk_ktiles=True,split_kt_warps=8
