#!/usr/bin/env bash
# Session 45 call 1 (H200; carry .whl and .gpu_out): K3 (96 x 8192, safe gate + L2 norm in the op), 6% short of
# issue 20's 1.25x on the H200. Nsight Compute on the four kernels besides the state pass (gate, intra, solve, W/U:
# where each one stalls, its occupancy and memory throughput), then the state pass with O inside on 128-wide V-tiles
# (96 programs, one per SM, W / q exp(G) / k exp(G_last - G) read once per chunk instead of twice) on 8 warps, with
# 1 and 2 stages.
source benchmarks/gpu_env.sh
SECTIONS="--section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis"
timeout -s INT -k 10 240 ncu --clock-control none \
    --kernel-name regex:'_gate_cumsum_kernel|_intra_chunk_kernel|_solve_kernel|_wu_kernel' \
    --launch-skip 8 --launch-count 4 $SECTIONS python3 benchmarks/ncu_chunk.py h96_dense_1x8192_safe_l2 > "$OUT/ncu.txt" 2>&1
grep -E "^  _|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" "$OUT/ncu.txt"
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:state_bv=128,state_warps=8 \
    --ab h96_dense_1x8192_safe_l2:state_bv=128,state_warps=8,state_stages=2 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
