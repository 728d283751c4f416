#!/usr/bin/env bash
# Twenty-fourth session (issue 16), H100 (carry .whl and .gpu_out), about 9 min: the backward's products with bf16
# operands outside the pass (`_xdot`'s "bf16": the prep's pairs and operands, chunked_precision; the anchored diagonal
# blocks of the pairs, pairs_diag_precision; the local kernels 3a-3c, split_precision), one at a time and all
# together, each line one process, speed at 32 heads x 16384 and K3 (96 x 8192, safe gate + L2 + beta logits), and
# every gradient's RMS-relative error against float64 on the three accuracy shapes (fla's from the twenty-third
# session: RESULTS.md, "Backward kernel"). BASE: settings every line takes (e.g. the pass's precisions).
source benchmarks/gpu_env.sh
base=${BASE:-}
launches=${LAUNCHES:-"default split_precision=bf16 chunked_precision=bf16 pairs_diag_precision=bf16 split_precision=bf16,chunked_precision=bf16,pairs_diag_precision=bf16"}
for round in 1 2; do  # round 1 with accuracy, round 2 speed only
    for launch in $launches; do
        l=$launch; [ "$l" = default ] && l=""
        l=$(echo "$base,$l" | sed 's/^,//; s/,$//')
        acc=(); [ "$round" = 1 ] && acc=(--accuracy ${ACC_SHAPES:+--accuracy-shapes $ACC_SHAPES})
        echo "== round $round $launch (with BASE '$base')" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 170 python3 benchmarks/bench_backward.py --no-fla --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
            ${l:+--launch "$l"} "${acc[@]}" 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
