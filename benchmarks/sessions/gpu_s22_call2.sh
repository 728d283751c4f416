#!/usr/bin/env bash
# Twenty-second session (issues 20 and 15), H100: the state pass and the output overlapped in one launch (launch
# setting out_overlap), checked on the GPU (its programs wait on counters: determinism over many calls) and timed
# A/B against the defaults where the sequential pass leaves the GPU idle (32, 16 and 8 pairs) and on K3 (96 pairs,
# where the default computes the output inside the pass); wider state tiles with 8 warps at 32 pairs beside it.
# Then the runner's GPU tests (the first call's script deselected them: the project's addopts skip the gpu marker).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_chunk.py -o addopts= -m gpu -q -p no:cacheprovider \
    -rfEs -k "overlap_on_gpu or launch_variants_on_gpu" 2>&1 | tail -15 | tee "$OUT/tests.txt"
ab=()
for spec in ${AB:-h32_dense_1x16384:out_overlap=True h16_dense_2x16384:out_overlap=True \
        h96_dense_1x8192_safe_l2:out_in_state=False,out_overlap=True h96_dense_1x8192:out_in_state=False,out_overlap=True \
        h8_dense_1x131072:out_overlap=True h32_dense_1x16384:state_bv=64,state_warps=8 \
        h32_dense_1x16384:state_bv=128,state_warps=8}; do ab+=(--ab "$spec"); done
timeout -s INT -k 10 $((${AB_END:-400} - SECONDS)) python3 benchmarks/bench_chunk.py --no-speed "${ab[@]}" 2>&1 \
    | tee "$OUT/ab.txt"
export CHEATS_BASE=triton
timeout -s INT -k 10 $((570 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu -rfEs \
    tests/runner/test_gpu.py 2>&1 | tail -20 | tee "$OUT/runner_gpu_tests.txt"
