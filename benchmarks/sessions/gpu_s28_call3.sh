#!/usr/bin/env bash
# Twenty-eighth session, call 3 (H100; carry .whl and .gpu_out): (1) the forward's register caps (chunk.LAUNCH
# *_maxnreg; ptxas sm_90, triton 3.6, K3 shape: intra 255 registers at 2 warps = 4 programs per SM, 168 -> 6 for
# 68 bytes of spills, 128 -> 8 for 404; W/U 162 at 4 warps = 3, 128 -> 4 for 108; the state pass 255 with 72 bytes
# spilled = 2, 168 -> 3 for 720), each against the defaults in 7 alternating rounds; (2) the backward's new
# default caps (sums 128, operands 168) against fla 0.6.0 on the three training shapes, one process; (3) the GPU
# tests of the backward.
source benchmarks/gpu_env.sh
ab=()
for s in h96_dense_1x8192_safe_l2 h32_dense_1x16384; do
    for c in intra_maxnreg=168 intra_maxnreg=128 wu_maxnreg=128 state_maxnreg=168; do ab+=(--ab "$s:$c"); done
done
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed "${ab[@]}" 2>&1 | grep -v -i warn | tee "$OUT/ab_chunk.txt"
timeout -s INT -k 10 $((480 - SECONDS)) python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
timeout -s INT -k 10 $((590 - SECONDS)) python3 -m pytest tests/kernels/test_backward.py tests/kernels/test_backward_chunked.py \
    -o addopts= -m gpu -q -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/pytest_backward_gpu.txt"
