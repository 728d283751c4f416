#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out with .gpu_out/stages from `TRITON_INTERPRET=1 python
# benchmarks/probe_stages.py save`), at most 9.5 min: (1) which launch of the chunked backward goes wrong on the GPU at
# K <= 16, every product in fp32 (ieee) on both sides (probe_stages.py compare, one process per shape, K = 32 the
# control); (2) the K = 12, H = HV = 2 shape that ended in an illegal address (call 9) under compute-sanitizer
# memcheck; (3) the K <= 16 guard's GPU tests and test_autograd.py (queued as benchmarks/sessions/gpu_s24_call13.sh); (4) ours and fla
# fwd+bwd in one process with the current defaults.
source benchmarks/gpu_env.sh
for f in k12 16_1_2_70_10 12_2_2_70_10 32_1_2_70_10 12_1_2_200_10; do
    shape=$([ "$f" = k12 ] && echo 12,1,2,70,10 || echo "$f" | tr _ ,)
    echo "== $shape" | tee -a "$OUT/stages.txt"
    PROBE_SHAPE=$shape timeout -s INT -k 10 60 python3 benchmarks/probe_stages.py compare .gpu_out/stages/$f.pt 2>&1 \
        | grep -v -i warn | tail -18 | tee -a "$OUT/stages.txt"
done
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
echo "== memcheck 12,2,2,70,10" | tee -a "$OUT/sanitizer.txt"
PROBE_SHAPE=12,2,2,70,10 timeout -s INT -k 10 120 "$san" --tool memcheck --print-limit 6 python3 benchmarks/probe_stages.py \
    compare .gpu_out/stages/12_2_2_70_10.pt 2>&1 | grep -v -i warn | grep -E "^=====|launch|Error|error|vs" | head -60 \
    | tee -a "$OUT/sanitizer.txt"
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -k small_k -q \
    -p no:cacheprovider --tb=short 2>&1 | grep -v -i warn | tail -30 | tee "$OUT/tests.txt"
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=short 2>&1 \
    | grep -v -i warn | tail -30 | tee -a "$OUT/tests.txt"
echo "== ours and fla" | tee -a "$OUT/backward.txt"
timeout -s INT -k 10 $((560 - SECONDS)) python3 benchmarks/bench_backward.py --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
    2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
