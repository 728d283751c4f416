#!/usr/bin/env bash
# Session 31 call 6 (H100; carry .whl and .gpu_out with the kept-states tree in .gpu_out/tree_keep): where the kept
# states go wrong (benchmarks/sessions/debug_s31_kept_states.py).
source benchmarks/gpu_env.sh
PYTHONPATH=$PWD/.gpu_out/tree_keep:/tmp/site timeout -s INT -k 10 200 python3 \
    benchmarks/sessions/debug_s31_kept_states.py 2>&1 | grep -v -i warn | tee "$OUT/debug.txt"
