#!/usr/bin/env bash
# Session 42 call 1 (H200, fresh machine; carry .whl and .gpu_out): the leads the forty-first session screened with
# ptxas on the CPU, never timed: the intra kernel without the cp.async pipeline (intra_stages=1: 8 KB shared instead
# of 40.5), the same with K-tiles of 16 (168 registers, no spill, 6 programs per SM), W/U with 32 x 32 tiles (100
# registers; with a cap of 104, 90); then the chunked forward's GPU tests under the W/U register cap (not run since
# the forty-first session made it the default).
source benchmarks/gpu_env.sh
S=h96_dense_1x8192_safe_l2
P=h32_dense_1x16384
timeout -s INT -k 10 380 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $S:intra_stages=1 --ab $P:intra_stages=1 \
    --ab $S:intra_stages=1,intra_bk=16 --ab $P:intra_stages=1,intra_bk=16 \
    --ab $S:wu_bk=32,wu_bv=32 --ab $S:wu_bk=32,wu_bv=32,wu_maxnreg=104 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
timeout -s INT -k 10 200 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
