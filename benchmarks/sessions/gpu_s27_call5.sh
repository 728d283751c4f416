#!/usr/bin/env bash
# Twenty-seventh session, H100 (carry .whl and .gpu_out), about 8 min: LAUNCH["chunked_kept_states"], S and dS_end
# handed from the pass to 3a in bf16 ("dS": dS_end only; "both"), against fp32: two rounds on 32 x 16384 and K3,
# then each one's accuracy against float64 (fla not run: its numbers are the twenty-sixth session's).
source benchmarks/gpu_env.sh
AB_TIMEOUT=150 bash benchmarks/ab_backward.sh h32_dense_1x16384,h96_dense_1x8192_safe_l2 2 "" chunked_kept_states=dS \
    chunked_kept_states=both
for launch in "" chunked_kept_states=dS chunked_kept_states=both; do
    echo "== accuracy [$launch]" | tee -a "$OUT/accuracy.txt"
    timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy --launch "$launch" \
        --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/accuracy.txt"
done
