#!/usr/bin/env bash
# Twenty-eighth session, call 6 (H100; carry .whl and .gpu_out): `_local_vk_kernel` on its new defaults (32 x 32
# tiles, 4 warps, Triton's default stages: 255 registers, 16 bytes of spills, 112 KiB of shared memory) against
# one stage (48 KiB, no spills), one stage capped at 168 registers (three programs per SM, 120 bytes of spills) or
# 128 (four, 416 bytes), two stages (84 KiB, 112 bytes); two rounds on K3 and 32 x 16384. Then ours against fla
# 0.6.0 on the three training shapes with whatever is the default then, one process.
source benchmarks/gpu_env.sh
AB_TIMEOUT=100 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" split_vk_stages=1 \
    split_vk_stages=1,split_vk_maxnreg=168 split_vk_stages=1,split_vk_maxnreg=128 split_vk_stages=2
timeout -s INT -k 10 $((585 - SECONDS)) python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
