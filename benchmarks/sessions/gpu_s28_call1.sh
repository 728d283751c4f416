#!/usr/bin/env bash
# Twenty-eighth session, call 1: the queued gpu_s28_next.sh as written.
# Queued by the twenty-seventh session for the next device time, H100 (carry .whl and .gpu_out), about 10 min,
# untimed so far, in this order: (2) then (1). (1) ours against fla 0.6.0 on K3 and the packed batch with the current defaults (last timed
# against fla before the twenty-sixth session's K-tile change and the twenty-seventh's prep grid; fla's first
# compile there takes minutes); (2) the state pass on V-tiles of 64 with 8 warps (fewer programs re-reading W, Kt
# and Qt from L2 per chunk; with 4 warps 64 spilled; with 8 warps and two stages 64 bytes, triton 3.6) and the sums kernel under register caps (LAUNCH["sums_maxnreg"]:
# 168 / 128 registers let three / four programs be resident per SM instead of two, for 8-32 / 80-120 bytes of
# spills; ptxas for sm_90, triton 3.6, `compile_sm90.py --chunked --spills`), two rounds on 32 x 16384.
source benchmarks/gpu_env.sh
AB_TIMEOUT=150 bash benchmarks/ab_backward.sh h32_dense_1x16384 2 "" chunked_pass_bv=64,chunked_pass_warps=8 \
    sums_maxnreg=168 sums_maxnreg=128
timeout -s INT -k 10 $((585 - SECONDS)) python3 benchmarks/bench_backward.py --shapes h96_dense_1x8192_safe_l2,h32_varlen_real_65536 \
    2>&1 | grep -v -i warn | tee -a "$OUT/fla.txt"
