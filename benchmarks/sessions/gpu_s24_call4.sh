#!/usr/bin/env bash
# Twenty-fourth session (issue 16), H100 (carry .whl and .gpu_out), about 7 min: the pass in bf16 but for the
# reverse recursion's Qt^T dO in tf32 (chunked_pass_source_precision; benchmarks/pass_rounding_estimate.py on the CPU:
# dh0 2.4e-4 against 1.7e-3 all bf16), against the default (now with the pairs' diagonal blocks in bf16) and the
# all-bf16 pass: benchmarks/sessions/gpu_s24_bf16_products.sh's two rounds. Then the chunked mode's GPU tests.
export LAUNCHES="default chunked_pass_precision=bf16,chunked_pass_source_precision=tf32 chunked_pass_precision=bf16"
bash benchmarks/sessions/gpu_s24_bf16_products.sh
source benchmarks/gpu_env.sh
timeout -s INT -k 10 $((570 - SECONDS)) python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -5 | tee "$OUT/tests.txt"
