#!/usr/bin/env bash
# Twenty-fourth session, H100 (carry .whl and .gpu_out), about 5 min: call 7's probes all passed under
# CUDA_LAUNCH_BLOCKING=1 while test_autograd.py's fp32 training test faults (illegal address) in pytest. Each step a
# fresh process: the test alone, plain and blocking; under compute-sanitizer's memcheck if the image has it; then
# test_option_grads.py alone, and the probe's autograd piece without blocking.
source benchmarks/gpu_env.sh
t="tests/kernels/test_autograd.py::test_training_gradients_fp32_against_float64[unbounded]"
run() { echo "== $*" | tee -a "$OUT/diag.txt"; timeout -s INT -k 10 150 "$@" 2>&1 | grep -v -i warn | tail -40 | tee -a "$OUT/diag.txt"; }
run python3 -m pytest "$t" -q -p no:cacheprovider --tb=short
CUDA_LAUNCH_BLOCKING=1 run python3 -m pytest "$t" -q -p no:cacheprovider --tb=short
run python3 benchmarks/probe_training_fp32.py autograd
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "compute-sanitizer: ${san:-absent}" | tee -a "$OUT/diag.txt"
[ -n "$san" ] && run "$san" --tool memcheck --print-limit 3 python3 -m pytest "$t" -q -p no:cacheprovider --tb=line
run python3 -m pytest tests/kernels/test_option_grads.py -q -p no:cacheprovider --tb=short
