#!/usr/bin/env bash
# Seventeenth session, first H100 call (issue 20): the sixteenth session's untimed variants (qg_in_intra,
# solve_in_intra, W/U warps and stages, the lighter split pass) A/B against the defaults, then the GPU tests of
# the chunk kernel (they compile every variant and the changed 5a/5b). Logs in $OUT.
source benchmarks/gpu_env.sh
ab=(h96_dense_1x8192_safe_l2:qg_in_intra=True
    h96_dense_1x8192_safe_l2:qg_in_intra=True,wu_warps=8
    h96_dense_1x8192_safe_l2:qg_in_intra=True,wu_stages=1
    h96_dense_1x8192_safe_l2:wu_warps=8
    h96_dense_1x8192_safe_l2:solve_in_intra=True
    h32_dense_1x16384:qg_in_intra=True
    h32_dense_1x16384:solve_in_intra=True
    h32_dense_1x16384:state_split=64
    h8_dense_1x131072:state_split=0
    h8_dense_1x16384:state_split=0)
args=()
for spec in "${ab[@]}"; do args+=(--ab "$spec"); done
timeout -s INT -k 15 380 python3 benchmarks/bench_chunk.py --no-speed "${args[@]}" 2>&1 | tee "$OUT/ab.txt"
timeout -s INT -k 15 170 python3 -m pytest tests/kernels/test_chunk.py -o addopts= -m gpu -q -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/tests.txt"
