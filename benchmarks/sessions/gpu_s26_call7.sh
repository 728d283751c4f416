#!/usr/bin/env bash
# Twenty-sixth session, H100 (carry .whl and .gpu_out), about 7 min: `_local_vk_kernel`'s warps and K-tile (the
# defaults 8 / 32 against 4 warps, and against K-tiles of 64), two alternating rounds on 32 x 16384, through
# benchmarks/ab_backward.sh.
source benchmarks/gpu_env.sh
AB_TIMEOUT=80 bash benchmarks/ab_backward.sh h32_dense_1x16384 2 "" split_vk_warps=4 split_bk=64
