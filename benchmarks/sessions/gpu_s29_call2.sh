#!/usr/bin/env bash
# Twenty-ninth session, call 2 (H100; carry .whl and .gpu_out): dq, dk, dg inside the sums kernel again (the
# twenty-seventh session's 2ffc6e5, a loser then at 255 registers, one or two programs per SM), now under the
# sums kernel's register cap: the tree .gpu_out/tree_fused (main at c14e4a8 with 2ffc6e5 merged in; ptxas: 184-244
# bytes of spills at 128, 32-100 at 168) at its default cap 128 and at 168, against the defaults; two rounds on K3
# and 32 x 16384.
source benchmarks/gpu_env.sh
AB_TIMEOUT=130 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" \
    tree:.gpu_out/tree_fused tree:.gpu_out/tree_fused@sums_maxnreg=168
