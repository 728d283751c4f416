#!/usr/bin/env bash
# Session 41 call 1 (H200, fresh machine; carry .whl and .gpu_out): launch settings never A/B'd on K3 (safe gate,
# gate and L2 norm in the op), where the W/U kernel reads k and fp32 G and writes k exp(G_last - G): the W/U operands
# from the intra kernel with the norm factors from the gate kernel, the same with the gate inside the intra program
# (then G can stay in L2: discard_g), W/U's warps and K-tile, the gate kernel's warps; then the GPU tests of the
# chunked forward (not re-run since the fortieth session's switch of _tf32_rn to bit operations).
source benchmarks/gpu_env.sh
S=h96_dense_1x8192_safe_l2
timeout -s INT -k 10 330 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $S:kg_in_intra=True,l2_in_intra=False \
    --ab $S:gate_in_intra=True,kg_in_intra=True,l2_in_intra=False \
    --ab $S:gate_in_intra=True,kg_in_intra=True \
    --ab $S:wu_warps=8 --ab $S:wu_bk=128 --ab $S:gate_warps=8 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
timeout -s INT -k 10 200 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
