#!/usr/bin/env bash
# Prepared in the twenty-second session for the next (issue 20), H100 (carry .whl and .gpu_out), about 6 min:
# 1. the GPU test of out_overlap (now releasing every overlap_every chunks: 40 calls per shape, the same bits);
# 2. A/B against the defaults (bench_chunk.py --ab, 7 alternating rounds): out_overlap at 32 and 16 pairs with 8
#    and 32 chunks per release; the W/U kernel on narrower K-tiles on K3 and at 32 x 16384 (ptxas for sm_90,
#    triton 3.9 on the CPU machine, K3 shape: 920 bytes spilled at the default wu_bk=64, 168 at 32, 12 at 32 with
#    wu_bv=32, none at 16; the H100 runs triton 3.6).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_chunk.py -o addopts= -m gpu -q -p no:cacheprovider \
    -rfEs -k "overlap_on_gpu" 2>&1 | tail -5 | tee "$OUT/tests.txt"
ab=()
for spec in ${AB:-h32_dense_1x16384:out_overlap=True h32_dense_1x16384:out_overlap=True,overlap_every=32 \
        h16_dense_2x16384:out_overlap=True h96_dense_1x8192_safe_l2:wu_bk=32 h96_dense_1x8192_safe_l2:wu_bk=32,wu_bv=32 \
        h96_dense_1x8192_safe_l2:wu_bk=16 h32_dense_1x16384:wu_bk=32,wu_bv=32}; do ab+=(--ab "$spec"); done
timeout -s INT -k 10 $((570 - SECONDS)) python3 benchmarks/bench_chunk.py --no-speed "${ab[@]}" 2>&1 | tee "$OUT/ab_chunk.txt"
