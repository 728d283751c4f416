#!/usr/bin/env bash
# Twenty-fourth session, H100 (carry .whl and .gpu_out), about 3 min: which mode and which K the GPU backward gets
# wrong (call 11: the chunked and exact modes differ by 4e-2 on dk at K = 12, GVA 1 -> 2, also on 52ffb05, then an
# illegal address): each mode alone against float64 autograd on the CPU, one fresh process per (K, mode).
source benchmarks/gpu_env.sh
for K in 12 16 32 100; do
    for mode in exact chunked; do
        PROBE_TRUTH=1 PROBE_ONLY=$mode PROBE_SHAPES="$K,1,2,70" timeout -s INT -k 10 40 python3 benchmarks/probe_small_k.py 2>&1 \
            | grep -v -i warn | grep -E "^K=|Error" | tail -2 | tee -a "$OUT/modes.txt"
    done
done
