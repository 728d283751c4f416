#!/usr/bin/env bash
# Session 43 call 9 (H200; carry .whl and .gpu_out): accuracy against float64 at real sizes (8 x 4096, 4 x 16384;
# benchmarks/solve_precision_probe.py: bench inputs and weak decays, precomputed and safe gates) of the defaults (one
# anchor for every gate) against the two anchors (intra_one_anchor=False), issue 20's "no accuracy lost".
source benchmarks/gpu_env.sh
timeout -s INT -k 10 70 python3 benchmarks/solve_precision_probe.py intra_one_anchor=False 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 110 python3 benchmarks/solve_precision_probe.py --heads 4 --tokens 16384 intra_one_anchor=False 2>&1 | grep -v -i warn | tee -a "$OUT/accuracy.txt"
