#!/usr/bin/env bash
# For the twenty-fourth session (issue 16), H100 (carry .whl and .gpu_out), about 9 min: the backward's pass with
# bf16 operands in the forward recursion only (chunked_pass_rev_precision=tf32: dh0 comes from the reverse one),
# against the tf32 default and bf16 in both. The twenty-third session measured bf16 in both 8.5% faster forward +
# backward at 32 heads x 16384, with dh0 at 1.69e-3 / 1.71e-3 against fla's 1.64e-3 / 1.69e-3 on the two `pre`
# shapes (RESULTS.md, "Backward kernel"). Alternating processes; round 1 also measures every gradient against
# float64 on those two shapes (fla's in the same table), round 2 speed only.
source benchmarks/gpu_env.sh
launches="chunked_pass_precision=tf32 chunked_pass_precision=bf16,chunked_pass_rev_precision=tf32 chunked_pass_precision=bf16"
for round in 1 2; do
    for launch in $launches; do
        echo "== round $round $launch" | tee -a "$OUT/backward.txt"
        acc=(); [ "$round" = 1 ] && acc=(--accuracy --accuracy-shapes h32_dense_1x1024,h8_varlen_3)
        timeout -s INT -k 10 150 python3 benchmarks/bench_backward.py --no-fla --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
            --launch "$launch" "${acc[@]}" 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
