#!/usr/bin/env bash
# NOT RUN in the forty-second session (the device time was spent): queued for the next.
# Session 42 call 10 (H200; carry .whl and .gpu_out; the device time left: about 2 minutes): the CPU tests of one
# anchor run on the GPU, where the products are tf32 (the interpreter's are fp32): the accuracy against two anchors
# at the gate bounds -7.5, -5, -8, and the causality test's rounding bound for rows before a block's anchor.
source benchmarks/gpu_env.sh
timeout -s INT -k 5 110 python3 -m pytest -o addopts= -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "causal or one_anchor_up_to" 2>&1 | tail -15 | tee "$OUT/tests.txt"
