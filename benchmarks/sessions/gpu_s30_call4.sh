#!/usr/bin/env bash
# Session 30 call 4 (H100; carry .whl and .gpu_out): the pass with both recursions interleaved in one program
# (LAUNCH["chunked_pass_parallel"] = "interleaved"; ptxas sm_90: 4 warps one stage 255 registers 16 bytes of
# spills, 36 KiB: two per SM, K3's 384 programs in two waves against the parallel form's 768 in three; 8 warps one
# stage 212 registers, one per SM; two stages 147 KiB, one per SM). Two alternating rounds on K3, 32 x 16384.
source benchmarks/gpu_env.sh
AB_TIMEOUT=110 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" \
    chunked_pass_parallel=interleaved,chunked_pass_stages=1 chunked_pass_parallel=interleaved \
    chunked_pass_parallel=interleaved,chunked_pass_stages=1,chunked_pass_warps=8
