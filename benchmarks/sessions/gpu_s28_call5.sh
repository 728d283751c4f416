#!/usr/bin/env bash
# Twenty-eighth session, call 5 (H100; carry .whl and .gpu_out): launch settings beside the new register caps, two
# rounds on K3 and 32 x 16384: the sums kernel on K-tiles of 16 (fewer registers: at the 128 cap, or at 96 = five
# programs per SM); `_local_k_kernel` on K-tiles of 16; `_local_vk_kernel` (255 registers at 8 warps: one program
# per SM) on 4 warps, with 64 x 64 and with 32 x 32 tiles (two programs per SM).
source benchmarks/gpu_env.sh
AB_TIMEOUT=100 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" sums_bk=16 \
    sums_bk=16,sums_maxnreg=96 split_k_bk=16 split_vk_warps=4 split_vk_warps=4,split_bv=32,split_bk=32
