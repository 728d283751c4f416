#!/usr/bin/env bash
# Twenty-fourth session, H100 (carry .whl and .gpu_out), about 4 min: call 6's illegal memory access in
# test_autograd.py's fp32 training test, piece by piece in separate processes with CUDA_LAUNCH_BLOCKING=1
# (benchmarks/probe_training_fp32.py), then test_autograd.py and test_option_grads.py whole.
source benchmarks/gpu_env.sh
export CUDA_LAUNCH_BLOCKING=1
for args in "forward" "l2" "gate_backward" "backward_raw" "backward_raw mode=exact" "backward_raw chunked_pass_precision=tf32" \
            "backward_raw pairs_diag_precision=tf32" "autograd"; do
    timeout -s INT -k 10 60 python3 benchmarks/probe_training_fp32.py $args 2>&1 | grep -v -i warn | tail -25 | tee -a "$OUT/probe.txt"
done
unset CUDA_LAUNCH_BLOCKING
timeout -s INT -k 10 $((560 - SECONDS)) python3 -m pytest tests/kernels/test_autograd.py tests/kernels/test_option_grads.py -q \
    -p no:cacheprovider --tb=line 2>&1 | grep -v -i warn | tail -15 | tee "$OUT/tests.txt"
