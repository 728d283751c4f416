#!/usr/bin/env bash
# Session 38 call 2 (H100; carry .whl and .gpu_out): the intra kernel's launch knobs again, now that it also writes
# the W/U operands (kg_in_intra, thirty-seventh session), on 32 x 16384 and K3.
source benchmarks/gpu_env.sh
S=h32_dense_1x16384
K3=h96_dense_1x8192_safe_l2
timeout -s INT -k 10 420 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $S:intra_maxnreg=168 --ab $S:intra_maxnreg=192 --ab $S:intra_stages=2 --ab $S:intra_stages=4 \
    --ab $S:intra_bk=64 --ab $S:intra_bk=16 --ab $S:intra_warps=4 \
    --ab $K3:intra_maxnreg=168 --ab $K3:intra_maxnreg=192 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
