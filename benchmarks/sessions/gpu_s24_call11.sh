#!/usr/bin/env bash
# Twenty-fourth session, H100 (carry .whl and .gpu_out with .gpu_out/old_s23 = `git archive 52ffb05 kda_trace`), about
# 2 min: is call 9/10's illegal address (benchmarks/probe_small_k.py, both modes in one process, K = 12) older than
# this session? The probe on 52ffb05's kernels, on the current ones with the old precisions, and on the current
# defaults, three times each, each a fresh process.
source benchmarks/gpu_env.sh
export PROBE_SHAPES="12,1,2,70;12,2,2,70;16,1,2,70;32,1,2,70;128,1,2,70"
for i in 1 2 3; do
    echo "== 52ffb05 ($i)" | tee -a "$OUT/bisect.txt"
    PYTHONPATH=$PWD/.gpu_out/old_s23:/tmp/site timeout -s INT -k 10 60 python3 benchmarks/probe_small_k.py 2>&1 \
        | grep -v -i warn | grep -E "^K=|Error" | tail -6 | tee -a "$OUT/bisect.txt"
    echo "== current, old precisions ($i)" | tee -a "$OUT/bisect.txt"
    timeout -s INT -k 10 60 python3 benchmarks/probe_small_k.py chunked_pass_precision=tf32 pairs_diag_precision=tf32 2>&1 \
        | grep -v -i warn | grep -E "^K=|Error" | tail -6 | tee -a "$OUT/bisect.txt"
    echo "== current ($i)" | tee -a "$OUT/bisect.txt"
    timeout -s INT -k 10 60 python3 benchmarks/probe_small_k.py 2>&1 | grep -v -i warn | grep -E "^K=|Error" | tail -6 | tee -a "$OUT/bisect.txt"
done
