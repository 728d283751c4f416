#!/usr/bin/env bash
# Session 41 call 5 (H200; carry .whl and .gpu_out): intra_kouter (the intra kernel with the K loop outside its four
# blocks: each K-tile of the chunk's rows loaded once, the block pairs' products from registers; ptxas for sm_90 on
# the CPU: 255 registers, 784 bytes spilled at K-tiles of 32, 188 at 16) A/B on K3 and 32 x 16384; the GPU tests
# of its launch variants.
source benchmarks/gpu_env.sh
K3=h96_dense_1x8192_safe_l2
P=h32_dense_1x16384
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $K3:intra_kouter=True --ab $K3:intra_kouter=True,intra_bk=16 \
    --ab $P:intra_kouter=True --ab $P:intra_kouter=True,intra_bk=16 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
timeout -s INT -k 10 150 python3 -m pytest -o addopts= -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "launch_variants_against and intra_kouter" 2>&1 | tail -15 | tee "$OUT/tests.txt"
