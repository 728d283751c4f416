#!/usr/bin/env bash
# Twenty-third session, seventh call (issue 16), H100 (carry .whl and .gpu_out), about 9 min: the backward with its
# pass in bf16 for 16-bit inputs (the new default) against fla's chunk_kda: every gradient's accuracy against
# float64 on both accuracy shapes (the bf16 pass was measured on the safe-gate shape only), then forward + backward
# and backward alone on the three shapes, fla tuned on each; then the backward's GPU tests.
set -o pipefail
source benchmarks/gpu_env.sh
timeout -s INT -k 10 240 python3 benchmarks/bench_backward.py --no-speed --accuracy 2>&1 | grep -v -i warn \
    | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 $((500 - SECONDS)) python3 benchmarks/bench_backward.py --fla-tune-each 2>&1 | grep -v -i warn \
    | tee "$OUT/speed.txt"
timeout -s INT -k 10 $((580 - SECONDS)) python3 -m pytest tests/kernels/test_backward_chunked.py tests/kernels/test_autograd.py \
    -o addopts= -m gpu -q -p no:cacheprovider -rfEs 2>&1 | tail -5 | tee "$OUT/tests.txt"
