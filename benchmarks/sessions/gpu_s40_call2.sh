#!/usr/bin/env bash
# Session 40 call 2 (H200, call 1's machine; carry .whl and .gpu_out): the peeled-solve test alone (it failed in
# call 1 under a 60 s limit, no message came back), then accuracy against float64 of the peeled tf32 solve (the
# default), the unpeeled tf32 solve (the thirty-ninth session's) and the unpeeled tf32x3 solve (before it) at 8 x 4096
# and 4 x 16384 (benchmarks/solve_precision_probe.py).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 120 python3 -m pytest -o addopts= -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "peeled" 2>&1 | tail -30 | tee "$OUT/tests.txt"
OLD=solve_peel=False,solve_inv_precision=tf32x3,solve_merge_precision=tf32x3
timeout -s INT -k 10 120 python3 benchmarks/solve_precision_probe.py solve_peel=False $OLD 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 240 python3 benchmarks/solve_precision_probe.py --heads 4 --tokens 16384 solve_peel=False $OLD 2>&1 | grep -v -i warn | tee -a "$OUT/accuracy.txt"
