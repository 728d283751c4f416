#!/usr/bin/env bash
# Session 33 call 6 (H100; carry .whl and .gpu_out; the session's last 250 s of device time): the attention scale
# as one element in the buffers' dtype (kernels/backward.py `scale_arg`); the float64 probe's three cases in the
# chunked and the exact modes, which gave 1.7e-8 at scale 0.7 in call 5.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 170 python3 benchmarks/float64_gpu_probe.py defaults mode=exact 2>&1 | grep -v -i warn \
    | tee "$OUT/float64_probe.txt"
