#!/usr/bin/env bash
# Session 30 call 2 (H100; carry .whl and .gpu_out): `_local_k_kernel` (3c, a streaming kernel: no products, 40
# bytes per element) as one program per work item, the gates one row later read from memory, instead of
# persistent programs (8 per SM) that shifted the gates through a scratch buffer between two barriers. At the old
# form K3 took 2.14 ms in it (about 1.9 TB/s). Against the tree .gpu_out/tree_base (8bd0803, the persistent form);
# beside the new form on 8 warps and on K-tiles of 16 (ptxas at 32 x 4 warps: 209 registers, two programs per SM).
# Then the per-kernel GPU times of one backward (torch.profiler) with the new form, ours only.
source benchmarks/gpu_env.sh
AB_TIMEOUT=110 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 tree:.gpu_out/tree_base \
    "" split_k_warps=8 split_k_bk=16
timeout -s INT -k 10 120 python3 benchmarks/bench_backward.py --no-fla --parts \
    --shapes h96_dense_1x8192_safe_l2,h32_dense_1x16384 2>&1 | grep -v -i warn | tee "$OUT/parts.txt"
