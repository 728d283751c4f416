#!/usr/bin/env bash
# Twenty-eighth session, call 2 (H100; carry .whl and .gpu_out): register caps. Call 1 found the sums kernel 9%
# faster fwd+bwd under maxnreg=128 (four programs per SM instead of two). Here, on 32 x 16384, two rounds: that cap
# against 96, and with it a cap on each other chunked kernel (ptxas sm_90, triton 3.6, `compile_sm90.py --chunked
# --spills`: pairs 244-255 registers, 168 -> 0-8 bytes of spills; operands 196, 168 -> 8; local_k 217, 168 -> 132;
# local_vk 255 at 8 warps = one program per SM, 128 -> two for 1228 bytes of spills); then K3 (96 heads x 8192,
# safe gate), one round: the defaults, sums 128, sums 128 with the pass at 168 (768 pass programs there).
source benchmarks/gpu_env.sh
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h32_dense_1x16384 2 sums_maxnreg=128 sums_maxnreg=96 \
    sums_maxnreg=128,prep_pairs_maxnreg=168 sums_maxnreg=128,prep_operands_maxnreg=168 \
    sums_maxnreg=128,split_k_maxnreg=168 sums_maxnreg=128,split_vk_maxnreg=128 \
    sums_maxnreg=128,prep_pairs_maxnreg=128
left=$((580 - SECONDS))
if [ $left -gt 60 ]; then
    AB_TIMEOUT=$((left / 3)) bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 1 "" sums_maxnreg=128 \
        sums_maxnreg=128,chunked_pass_maxnreg=168
fi
