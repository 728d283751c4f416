#!/usr/bin/env bash
# Eighteenth session, third H100 call (issue 16): the pass's two recursions as separate programs
# (chunked_pass_parallel, the new default) against one program for both, with 2 pipeline stages (150 registers
# instead of 204 at BV 16) and BV 32; 3a's V-tile and warps; two alternating rounds. Then every gradient's error
# against float64, ours (anchored diagonal blocks) and fla. Logs in $OUT.
source benchmarks/gpu_env.sh
shapes=h32_dense_1x16384,h96_dense_1x8192_safe_l2
for round in 1 2; do
    for launch in chunked_pass_parallel=True chunked_pass_parallel=False chunked_pass_stages=2 \
                  chunked_pass_stages=2,chunked_pass_bv=32 split_bv=32 split_v_warps=4; do
        echo "== round $round $launch" | tee -a "$OUT/ab.txt"
        timeout -s INT -k 15 100 python3 benchmarks/bench_backward.py --no-fla $([ $round = 1 ] && echo --parts) \
            --shapes "$shapes" --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
    done
done
timeout -s INT -k 15 250 python3 benchmarks/bench_backward.py --no-speed --accuracy 2>&1 | tee "$OUT/accuracy.txt"
