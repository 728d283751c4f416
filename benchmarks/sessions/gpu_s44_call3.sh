#!/usr/bin/env bash
# Session 44 call 3 (H200; carry .whl and .gpu_out): experiment state_prefetch (uncommitted working tree; diff kept
# beside the records). The state pass's loads that feed no product (the chunk's last G row, and with the output in
# the pass the q row factors) are not pipelined by Triton (TTGIR: a plain tt.load after the first product of each
# step), so their latency sits on the chain through S every step; with state_prefetch each step loads the next
# chunk's into registers instead. The same bits expected. Also K3's pass on 8 warps (255 registers, 72 bytes of
# spills on 4 with the output inside).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:state_prefetch=True --ab h16_dense_2x16384:state_prefetch=True \
    --ab h96_dense_1x8192_safe_l2:state_prefetch=True --ab h96_dense_1x8192:state_prefetch=True \
    --ab h8_dense_1x131072:state_prefetch=True --ab h96_dense_1x8192_safe_l2:state_warps=8 \
    --ab h96_dense_1x8192_safe_l2:state_prefetch=True,state_warps=8 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
