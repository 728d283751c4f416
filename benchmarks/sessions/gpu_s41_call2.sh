#!/usr/bin/env bash
# Session 41 call 2 (H200; carry .whl and .gpu_out): intra_split (two programs per chunk in the intra kernel, the k
# side and the q side, 188 registers instead of 255 at 2 warps in ptxas for sm_90) A/B on K3, 32 x 16384 and
# 16 x 2 x 16384, with register caps and 4 warps; the GPU launch-variant tests of the split.
source benchmarks/gpu_env.sh
K3=h96_dense_1x8192_safe_l2
P=h32_dense_1x16384
timeout -s INT -k 10 300 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $K3:intra_split=True --ab $K3:intra_split=True,intra_maxnreg=128 --ab $K3:intra_split=True,intra_maxnreg=168 \
    --ab $K3:intra_split=True,intra_warps=4 \
    --ab $P:intra_split=True --ab $P:intra_split=True,intra_maxnreg=128 --ab $P:intra_split=True,intra_maxnreg=168 \
    --ab h16_dense_2x16384:intra_split=True \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
timeout -s INT -k 10 200 python3 -m pytest -o addopts= -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "launch_variants and intra_split" 2>&1 | tail -15 | tee "$OUT/tests.txt"
