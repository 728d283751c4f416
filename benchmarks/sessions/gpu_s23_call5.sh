#!/usr/bin/env bash
# Prepared in the twenty-second session as benchmarks/sessions/gpu_s23_call3.sh; ran as the twenty-third session's fifth call. For
# issue 16, H100 (carry .whl and .gpu_out), about 6 min: the
# backward with chunked_pass_precision=bf16 (the pass's operands rounded to bf16) against the default (tf32), in
# alternating processes, speed at 32 heads x 16384 and K3 (fwd+bwd and bwd), and in the first round every
# gradient's accuracy against float64 on the safe-gate shape (fla's, eighteenth session: dq 3.38e-3 ... ddt_bias
# 5.35e-3; ours at tf32 2.43e-3 ... 2.71e-3). Then the chunked mode's GPU tests with it.
source benchmarks/gpu_env.sh
for round in 1 2; do
    for launch in chunked_pass_precision=tf32 chunked_pass_precision=bf16; do
        echo "== round $round $launch" | tee -a "$OUT/backward.txt"
        acc=(); [ "$round" = 1 ] && acc=(--accuracy --accuracy-shapes h8_dense_1x2048_safe_l2)
        timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-fla --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
            --launch "$launch" "${acc[@]}" 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
timeout -s INT -k 10 $((570 - SECONDS)) python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -5 | tee "$OUT/tests.txt"
