#!/usr/bin/env bash
# Session 30 call 1 (H100; carry .whl and .gpu_out), queued by the twenty-ninth session as gpu_s30_next.sh.
# untimed so far. LAUNCH["sums_one_anchor"] (written after the twenty-ninth session's device time, CPU-tested):
# where the gates' lower bound is known (the safe gate: K3), the sums kernel's diagonal blocks at one anchor (half
# the products, no range check or element-wise form compiled in), as fla's safe-gate path, whose intra kernel
# takes 0.215 us per (chunk, head) on K3 against 0.447 at 32 x 16384 without it (twenty-eighth session, call 4;
# ours: 0.35 on both). Beside it the pass on one pipeline stage capped at 168 registers: at two stages it takes
# 112 KiB of shared memory, so two programs per SM whatever the cap (why the twenty-eighth session's cap gained
# nothing), and K3's 768 pass programs (96 heads x 4 V-tiles x 2 directions) run in three waves of 128 sequential
# chunk steps; one stage (24 KiB) at 168 registers (64 bytes of spills; sm_90, triton 3.6) holds three per SM: two
# waves. 32 x 16384 (256 programs, one wave already; no gate bound) as the control. Accuracy of the one-anchor
# form on the safe-gate shape, then two alternating rounds.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy \
    --accuracy-shapes h8_dense_1x2048_safe_l2 --launch sums_one_anchor=True 2>&1 \
    | grep -v -i warn | grep -v Variable | tee -a "$OUT/accuracy.txt"
AB_TIMEOUT=110 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" sums_one_anchor=True \
    chunked_pass_stages=1,chunked_pass_maxnreg=168
