#!/usr/bin/env bash
# Twenty-sixth session, H100 (carry .whl and .gpu_out), about 9 min: ours (a4af043's defaults) and fla in one process
# on K3 and the packed batch (call 5's fla on K3 ran out of its time limit compiling on a fresh machine).
source benchmarks/gpu_env.sh
echo "== ours and fla" | tee -a "$OUT/fla.txt"
timeout -s INT -k 10 560 python3 benchmarks/bench_backward.py --shapes h96_dense_1x8192_safe_l2,h32_varlen_real_65536 \
    2>&1 | grep -v -i warn | tee -a "$OUT/fla.txt"
