#!/usr/bin/env bash
# Twenty-fourth session (issue 16), H100 (carry .whl and .gpu_out), at most 9.8 min: (1) why test_autograd's four
# tests failed on the GPU in call 5 (verbose); (2) the reverse recursion's Qt^T dO as two bf16 products of Qt's
# two bf16 terms ("bf16_split_a") against the tf32 default, alternating, accuracy in round 1; (3) fla in the same
# process on 32 heads x 16384 and K3, with its on-disk tuning.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=short \
    -k "fp32_against or head_groups" 2>&1 | grep -v -i warn | tail -60 > "$OUT/tests.txt"
for round in 1 2; do
    for launch in chunked_pass_source_precision=tf32 chunked_pass_source_precision=bf16_split_a; do
        acc=(); [ "$round" = 1 ] && acc=(--accuracy)
        echo "== round $round $launch" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-fla --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
            --launch "$launch" "${acc[@]}" 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
echo "== ours and fla" | tee -a "$OUT/backward.txt"
timeout -s INT -k 10 $((585 - SECONDS)) python3 benchmarks/bench_backward.py --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
    2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
