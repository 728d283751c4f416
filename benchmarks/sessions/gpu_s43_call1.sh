#!/usr/bin/env bash
# Session 43 call 1 (H200; carry .whl and .gpu_out): one anchor for every gate, range-checked at run time row by
# row where the safe gate does not bound it (precomputed gates: the intra kernel under the cap of 168 registers and
# the 32- and 16-wide tail tiles). A/B on the precomputed-gate shapes against the two anchors uncapped (the earlier
# default there): default / changed < 1 means the new default is faster; then the one-anchor launch uncapped. Then
# the one-anchor CPU tests on the GPU (tf32 products; s42's queued call 10) and the chunked forward's GPU tests.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:intra_one_anchor=False --ab h16_dense_2x16384:intra_one_anchor=False \
    --ab h96_dense_1x8192:intra_one_anchor=False --ab h32_dense_1x16384:intra_maxnreg=0 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
timeout -s INT -k 5 150 python3 -m pytest -o addopts= -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "causal or one_anchor or strong_gates" 2>&1 | tail -15 | tee "$OUT/cpu_tests_on_gpu.txt"
timeout -s INT -k 10 200 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
