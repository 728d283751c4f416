#!/usr/bin/env bash
# Twenty-fourth session, H100 (carry .whl and .gpu_out), about 3 min: the chunked backward against the exact mode
# on small K and GVA (benchmarks/probe_small_k.py), with the defaults, with every product in tf32x3, and with the
# pass and the pairs' diagonal blocks in tf32; then test_autograd.py whole.
source benchmarks/gpu_env.sh
for args in "" "chunked_pass_precision=tf32 pairs_diag_precision=tf32" \
            "chunked_pass_precision=tf32x3 pairs_diag_precision=tf32x3 chunked_precision=tf32x3 split_precision=tf32x3"; do
    timeout -s INT -k 10 90 python3 benchmarks/probe_small_k.py $args 2>&1 | grep -v -i warn | tail -12 | tee -a "$OUT/probe.txt"
done
timeout -s INT -k 10 120 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=line 2>&1 \
    | grep -v -i warn | tail -12 | tee "$OUT/tests.txt"
