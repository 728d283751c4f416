#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out), about 2 min: call 7's failing test with its GPU comparison
# (within bf16's rounding there; bit for bit under the interpreter only).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 120 python3 -m pytest tests/kernels/test_backward_chunked.py -k "inputs_dtype" -q \
    -p no:cacheprovider --tb=short 2>&1 | grep -v -i warn | tail -15 | tee "$OUT/tests.txt"
