#!/usr/bin/env bash
# Twenty-fourth session, H100 (carry .whl and .gpu_out), about 4 min: call 9's illegal address in
# benchmarks/probe_small_k.py (K = 12, GVA 1 -> 2, fp32), each mode alone under compute-sanitizer (memcheck names an
# out-of-bounds access, initcheck a read of memory never written), then the modes plain.
source benchmarks/gpu_env.sh
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export PROBE_SHAPES="12,1,2,70"
for mode in exact chunked; do
    for tool in memcheck initcheck; do
        echo "== $mode $tool" | tee -a "$OUT/sanitizer.txt"
        PROBE_ONLY=$mode timeout -s INT -k 10 100 "$san" --tool $tool --print-limit 4 python3 benchmarks/probe_small_k.py 2>&1 \
            | grep -v -i warn | grep -E "^=========|ran|Error|error" | head -40 | tee -a "$OUT/sanitizer.txt"
    done
done
echo "== plain, both modes" | tee -a "$OUT/sanitizer.txt"
PROBE_SHAPES="12,1,2,70;12,2,2,70;16,1,2,70;32,1,2,70;128,1,2,70" timeout -s INT -k 10 60 python3 benchmarks/probe_small_k.py 2>&1 \
    | grep -v -i warn | tail -8 | tee -a "$OUT/sanitizer.txt"
