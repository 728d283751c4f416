#!/usr/bin/env bash
# Session 40 call 3 (H200; carry .whl and .gpu_out): how the tf32 dot converts fp32 operands (the peeled solve's X
# error on the GPU was 2.5x the interpreter's rna emulation in call 2); then how far rounding alone moves the probe's
# numbers: the peeled tf32x3 solve and the output summed in the state pass (out_in_state), neither less accurate by
# design, at 8 x 4096 and 4 x 16384.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 60 python3 benchmarks/tf32_rounding_probe.py 2>&1 | grep -v -i warn | tee "$OUT/tf32.txt"
V="solve_inv_precision=tf32x3,solve_merge_precision=tf32x3 out_in_state=True"
timeout -s INT -k 10 120 python3 benchmarks/solve_precision_probe.py $V 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 240 python3 benchmarks/solve_precision_probe.py --heads 4 --tokens 16384 $V 2>&1 | grep -v -i warn | tee -a "$OUT/accuracy.txt"
