#!/usr/bin/env bash
# Session 41 call 3 (H200; carry .whl and .gpu_out): Nsight Compute on K3 (the shape furthest from issue 20's 1.25x on
# the H200): the gate kernel, the intra kernel, the solve and the W/U kernel (memory throughput, stall reasons,
# occupancy); then the GPU tests of the backward, gate and autograd modules (not re-run since the fortieth session
# moved _tf32_rn into chunk.py and changed its rounding to bit operations).
source benchmarks/gpu_env.sh
SECTIONS="--section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis"
timeout -s INT -k 10 200 ncu --clock-control none \
    --kernel-name regex:'_gate_cumsum_kernel|_intra_chunk_kernel|_solve_kernel|_wu_kernel' \
    --launch-skip 8 --launch-count 4 $SECTIONS python3 benchmarks/ncu_chunk.py h96_dense_1x8192_safe_l2 > "$OUT/ncu.txt" 2>&1
grep -E "^  _|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Achieved Occupancy|Registers Per|Block Limit" "$OUT/ncu.txt"
PHASES=tests timeout -s INT -k 10 330 bash benchmarks/gpu_bench_backward.sh
