#!/usr/bin/env bash
# Eighteenth session, fifth H100 call (issue 16): which pass settings compile (call 4's GPU tests ran out of shared
# memory with 2 stages), then the safe-gate accuracy shape with the element-wise diagonal blocks and fla (call 4
# measured ours with the anchored blocks). Logs in $OUT.
source benchmarks/gpu_env.sh
timeout -s INT -k 15 150 python3 benchmarks/probe_pass_launch.py 2>&1 | grep -v -i warn | tee "$OUT/probe.txt"
timeout -s INT -k 15 360 python3 benchmarks/bench_backward.py --no-speed --accuracy --accuracy-shapes h8_dense_1x2048_safe_l2 \
    --launch diag_blocks=elementwise 2>&1 | tee "$OUT/accuracy.txt"
