#!/usr/bin/env bash
# Session 41 call 6 (H200, the session's last device minutes; carry .whl and .gpu_out): the W/U kernel on K3 holds 2
# programs per SM (174 registers at 4 warps; shared memory would allow 3: call 3's Nsight Compute) at 64% of DRAM
# bandwidth: A/B of register caps and fewer pipeline stages on K3.
source benchmarks/gpu_env.sh
K3=h96_dense_1x8192_safe_l2
timeout -s INT -k 10 170 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $K3:wu_maxnreg=168 --ab $K3:wu_maxnreg=128 --ab $K3:wu_stages=2 --ab $K3:wu_stages=1 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
