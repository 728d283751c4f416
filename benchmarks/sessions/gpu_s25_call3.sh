#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out with .gpu_out/stages), about 6 min. Call 2 put the K <= 16 bug
# in `_local_da_kernel` (split_precision=tf32: M2 15% off); now its K-tiles are at least 32 wide and the guard is
# gone. (1) probe_narrow_dot.py: the product alone (a @ trans(b), inner width 16 / 32, tf32 / ieee / bf16, 4 / 8
# warps); (2) the stage probe with split_precision=tf32 at K = 12, 16; (3) the chunked mode's defaults against
# float64 at K = 12, 16, 32 and both modes in one process on call 9's shapes (the illegal address), then under
# memcheck; (4) the GPU tests of test_backward_chunked.py and test_autograd.py.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 60 python3 benchmarks/probe_narrow_dot.py 2>&1 | grep -v -i warn | tee "$OUT/narrow_dot.txt"
for shape in 12,1,2,70,10 16,1,2,70,10; do
    f=.gpu_out/stages/$( [ "$shape" = 12,1,2,70,10 ] && echo k12 || echo "$shape" | tr , _ ).pt
    echo "== $shape split_precision=tf32" | tee -a "$OUT/stages.txt"
    PROBE_SHAPE=$shape timeout -s INT -k 10 60 python3 benchmarks/probe_stages.py compare "$f" split_precision=tf32 2>&1 \
        | grep -v -i warn | grep -v ": same$" | tail -17 | tee -a "$OUT/stages.txt"
done
for K in 12 16 32; do
    PROBE_TRUTH=1 PROBE_ONLY=chunked PROBE_SHAPES="$K,1,2,70" timeout -s INT -k 10 60 python3 benchmarks/probe_small_k.py \
        2>&1 | grep -v -i warn | grep -E "^K=|Error" | tail -2 | tee -a "$OUT/small_k.txt"
done
echo "== both modes, call 9's shapes" | tee -a "$OUT/small_k.txt"
PROBE_SHAPES="12,1,2,70;12,2,2,70;16,1,2,70;32,1,2,70;128,1,2,70" timeout -s INT -k 10 90 python3 benchmarks/probe_small_k.py \
    2>&1 | grep -v -i warn | grep -E "^K=|Error" | tail -8 | tee -a "$OUT/small_k.txt"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
echo "== memcheck, both modes, 12,1,2,70;12,2,2,70" | tee -a "$OUT/small_k.txt"
PROBE_SHAPES="12,1,2,70;12,2,2,70" timeout -s INT -k 10 150 "$san" --tool memcheck --print-limit 6 python3 \
    benchmarks/probe_small_k.py 2>&1 | grep -v -i warn | grep -E "^=====|^K=|Error" | head -40 | tee -a "$OUT/small_k.txt"
timeout -s INT -k 10 200 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider --tb=short 2>&1 | grep -v -i warn | tail -30 | tee "$OUT/tests.txt"
timeout -s INT -k 10 $((570 - SECONDS)) python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=short 2>&1 \
    | grep -v -i warn | tail -30 | tee -a "$OUT/tests.txt"
