#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out with .gpu_out/stages), about 6 min. (1) Call 1: with every
# product in fp32 (ieee) the chunked mode is right on the GPU at K = 12 and 16 (1e-7 against float64): which
# precision key makes it wrong? Each key alone at its GPU default, the others ieee (probe_stages.py, K = 12 and 16,
# fp32 inputs). (2) The pass's V-tile: 64 wide (4 and 8 warps) against 32, 32 heads x 16384, two rounds, and the
# per-kernel times of the default backward (--parts).
source benchmarks/gpu_env.sh
for shape in 12,1,2,70,10 16,1,2,70,10; do
    for key in chunked_precision=tf32 split_precision=tf32 chunked_pass_precision=bf16 chunked_pass_source_precision=tf32 \
               chunked_pass_source_precision=bf16_split_a pairs_diag_precision=bf16 sums_diag_precision=tf32x3 \
               sums_diag_precision=tf32; do
        echo "== $shape $key" | tee -a "$OUT/bisect.txt"
        f=.gpu_out/stages/$( [ "$shape" = 12,1,2,70,10 ] && echo k12 || echo "$shape" | tr , _ ).pt
        PROBE_SHAPE=$shape timeout -s INT -k 10 60 python3 benchmarks/probe_stages.py compare "$f" "$key" 2>&1 \
            | grep -v -i warn | grep -v ": same$" | tail -17 | tee -a "$OUT/bisect.txt"
    done
done
for round in 1 2; do
    for launch in "" chunked_pass_bv=64 chunked_pass_bv=64,chunked_pass_warps=8; do
        echo "== round $round [$launch]" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-fla --shapes h32_dense_1x16384 \
            --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
echo "== parts" | tee -a "$OUT/backward.txt"
timeout -s INT -k 10 $((570 - SECONDS)) python3 benchmarks/bench_backward.py --no-fla --parts --shapes h32_dense_1x16384 \
    2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
