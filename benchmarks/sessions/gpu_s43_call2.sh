#!/usr/bin/env bash
# Session 43 call 2 (H200; carry .whl and .gpu_out): call 1 found one anchor with its run-time range check slower
# than the two anchors under the cap (0.971 / 0.973 / 0.958 on the precomputed shapes) but faster uncapped (32 x
# 16384: 1.038 over the capped one). The new rule: the cap (and the 32- and 16-wide tail tiles) only where the safe
# gate spares the check. A/B of that default against the two anchors (default / changed > 1: the new default is
# faster), the tail tile uncapped; and the state pass on the 32-pair shapes (H200 untested): split into segments of
# 64 chunks (lost at 32 and 16 on the H100), 32-wide V tiles.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 280 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:intra_one_anchor=False --ab h16_dense_2x16384:intra_one_anchor=False \
    --ab h96_dense_1x8192:intra_one_anchor=False --ab h32_dense_1x16384:intra_off_tail=True \
    --ab h32_dense_1x16384:state_split=64 --ab h16_dense_2x16384:state_split=64 \
    --ab h32_dense_1x16384:state_bv=32 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
