#!/usr/bin/env bash
# Twenty-seventh session, H100 (carry .whl and .gpu_out with .gpu_out/old_d6c), about 8 min: the prep operands
# kernel's tiles of one (chunk, value head) as neighbouring programs (X and A_qk read from DRAM once) against
# d6c7a00, two rounds on 32 x 16384 and K3; then ours against fla 0.6.0 on 32 x 16384 in one process (the
# defaults with `_local_vk_kernel`'s K-tiles of 64; fla was last timed beside K-tiles of 32).
source benchmarks/gpu_env.sh
AB_TIMEOUT=150 bash benchmarks/ab_backward.sh h32_dense_1x16384,h96_dense_1x8192_safe_l2 2 "" tree:.gpu_out/old_d6c
echo "== ours and fla" | tee -a "$OUT/fla.txt"
timeout -s INT -k 10 $((585 - SECONDS)) python3 benchmarks/bench_backward.py --shapes h32_dense_1x16384 2>&1 \
    | grep -v -i warn | tee -a "$OUT/fla.txt"
