#!/usr/bin/env bash
# Seventeenth session, second H100 call (issue 20): the gate inside the intra kernel (gate_in_intra, with
# intra_bk 16, where ptxas finds no spill) against the new defaults (qg_in_intra on, solve_in_intra deleted),
# then the GPU tests of the chunk kernel (they compile every variant). Logs in $OUT.
source benchmarks/gpu_env.sh
ab=(h96_dense_1x8192_safe_l2:gate_in_intra=True
    h96_dense_1x8192_safe_l2:gate_in_intra=True,intra_bk=16
    h96_dense_1x8192_safe_l2:intra_bk=16
    h32_dense_1x16384:gate_in_intra=True
    h32_dense_1x16384:gate_in_intra=True,intra_bk=16
    h32_dense_1x16384:intra_bk=16
    h8_dense_1x131072:gate_in_intra=True,intra_bk=16
    h32_varlen_16x4096:gate_in_intra=True,intra_bk=16)
args=()
for spec in "${ab[@]}"; do args+=(--ab "$spec"); done
timeout -s INT -k 15 330 python3 benchmarks/bench_chunk.py --no-speed "${args[@]}" 2>&1 | tee "$OUT/ab.txt"
timeout -s INT -k 15 200 python3 -m pytest tests/kernels/test_chunk.py -o addopts= -m gpu -q -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/tests.txt"
