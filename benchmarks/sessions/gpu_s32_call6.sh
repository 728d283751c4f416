#!/usr/bin/env bash
# Session 32 call 6 (H100; carry .whl and .gpu_out; the session's last 300 s of device time): LAUNCH["split_vk_ktiles"]
# (CPU-tested: the same bits), 3a's K-tiles as their own programs, against the defaults on K3, one round.
source benchmarks/gpu_env.sh
AB_TIMEOUT=80 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 1 "" split_vk_ktiles=True
