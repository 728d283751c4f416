#!/usr/bin/env bash
# Eighteenth session, second H100 call (issue 16): the anchored sums and pairs after call 1 (one product each
# for the rows before and after a block; the fall-backs one pair index at a time: 153-168 registers for the sums
# kernel instead of 255), with the pairs / sums kernels on 8 warps as variants, two alternating rounds; the GPU
# tests; then fla's chunk_kda on 32 heads x 16384 (its autotuning results are kept for the next calls).
# Logs in $OUT.
source benchmarks/gpu_env.sh
shapes=h32_dense_1x16384,h96_dense_1x8192_safe_l2
for round in 1 2; do
    for launch in diag_blocks=anchors prep_pairs_warps=8 sums_warps=8; do
        echo "== round $round $launch" | tee -a "$OUT/ab.txt"
        timeout -s INT -k 15 120 python3 benchmarks/bench_backward.py --no-fla $([ $round = 1 ] && echo --parts) \
            --shapes "$shapes" --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
    done
done
timeout -s INT -k 15 150 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q -p no:cacheprovider -rfEs \
    2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 15 280 python3 benchmarks/bench_backward.py --shapes h32_dense_1x16384 2>&1 | tee "$OUT/vs_fla.txt"
