#!/usr/bin/env bash
# Queued by the twenty-seventh session for the next device time, H100 (carry .whl and .gpu_out), about 10 min,
# untimed so far: (1) ours against fla 0.6.0 on K3 and the packed batch with the current defaults (last timed
# against fla before the twenty-sixth session's K-tile change and the twenty-seventh's prep grid; fla's first
# compile there takes minutes); (2) the state pass on V-tiles of 64 with 8 warps (fewer programs re-reading W, Kt
# and Qt from L2 per chunk; with 4 warps 64 spilled), two rounds on 32 x 16384.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 benchmarks/bench_backward.py --shapes h96_dense_1x8192_safe_l2,h32_varlen_real_65536 \
    2>&1 | grep -v -i warn | tee -a "$OUT/fla.txt"
AB_TIMEOUT=150 bash benchmarks/ab_backward.sh h32_dense_1x16384 2 "" chunked_pass_bv=64,chunked_pass_warps=8
