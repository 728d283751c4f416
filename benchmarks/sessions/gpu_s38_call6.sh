#!/usr/bin/env bash
# Session 38 call 6 (H100; carry .whl and .gpu_out): Nsight Compute on the intra kernel, the solve and the state pass
# at 32 x 16384 (the defaults): where their time goes (stall reasons, occupancy, memory throughput).
source benchmarks/gpu_env.sh
SECTIONS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
timeout -s INT -k 10 400 ncu --clock-control none --kernel-name regex:'_intra_chunk_kernel|_solve_kernel|_state_kernel' \
    --launch-skip 6 --launch-count 3 $SECTIONS python3 benchmarks/ncu_chunk.py h32_dense_1x16384 > "$OUT/ncu.txt" 2>&1
tail -c 3000 "$OUT/ncu.txt"
