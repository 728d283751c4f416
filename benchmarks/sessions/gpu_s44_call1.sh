#!/usr/bin/env bash
# Session 44 call 1 (H200; carry .whl and .gpu_out): where the time goes now. Per-kernel times (torch.profiler) of
# ours on the three shapes short of issue 20's 1.25x on the H200 (32 x 16384, 16 x 2 x 16384, K3), fla's on two of
# them (it autotunes first), and Nsight Compute's memory sections on the state pass at 32 x 16384 (is it bound by
# L2 traffic: each of a head's 8 V-tile programs reads the chunk's W and k exp(G_last - G)?).
source benchmarks/gpu_env.sh
for s in h32_dense_1x16384 h16_dense_2x16384 h96_dense_1x8192_safe_l2; do
    timeout -s INT -k 10 120 python3 benchmarks/bench_chunk.py --no-speed --profile $s 2>&1 | grep -v -i warn | tee -a "$OUT/profile.txt"
done
SECTIONS="--section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables"
timeout -s INT -k 10 150 ncu --clock-control none --kernel-name regex:'_state_kernel|_output_kernel' \
    --launch-skip 8 --launch-count 2 $SECTIONS python3 benchmarks/ncu_chunk.py h32_dense_1x16384 > "$OUT/ncu.txt" 2>&1
grep -E "^  _|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Block Limit" "$OUT/ncu.txt"
for s in h32_dense_1x16384 h96_dense_1x8192_safe_l2; do
    timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --profile-fla $s 2>&1 | grep -v -i warn | tee -a "$OUT/profile_fla.txt"
done
