#!/usr/bin/env bash
# Session 44 call 4 (H200; carry .whl and .gpu_out): experiments intra_prefetch and wu_prefetch (uncommitted working
# tree, with call 3's state_prefetch still off by default; diff kept beside the records). As in the state pass, the
# row vectors that feed no product are plain loads in the K loops (TTGIR): G's last row for k exp(G_last - G) (intra
# kernel with kg_in_intra; W/U kernel otherwise) and block 0's first G row (intra, feeds only q exp(G)). Each K-tile
# now loads the next tile's. The same bits expected.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:intra_prefetch=True --ab h16_dense_2x16384:intra_prefetch=True \
    --ab h96_dense_1x8192:intra_prefetch=True --ab h96_dense_1x8192_safe_l2:intra_prefetch=True \
    --ab h96_dense_1x8192_safe_l2:wu_prefetch=True --ab h96_dense_1x8192_safe_l2:intra_prefetch=True,wu_prefetch=True \
    --ab h32_dense_1x16384:state_prefetch=True,intra_prefetch=True \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
