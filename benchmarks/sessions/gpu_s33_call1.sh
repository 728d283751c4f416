#!/usr/bin/env bash
# Session 33 call 1 (H100; carry .whl and .gpu_out): LAUNCH["split_vk_ktiles"] A/B on K3 and 32 x 16384 (two
# rounds), then the chunked backward's GPU tests with the key switched on in this machine's copy of the tree.
source benchmarks/gpu_env.sh
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" split_vk_ktiles=True
cp kda_trace/kernels/backward.py /tmp/backward.py.orig
sed -i 's/{"split_vk_ktiles": False/{"split_vk_ktiles": True/' kda_trace/kernels/backward.py
grep -c '"split_vk_ktiles": True' kda_trace/kernels/backward.py | tee "$OUT/switched_on.txt"
timeout -s INT -k 10 240 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -8 | tee "$OUT/pytest_chunked_gpu_ktiles_on.txt"
timeout -s INT -k 10 120 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -k "k_tiles or one_launch" -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -8 | tee "$OUT/pytest_ktiles_one_launch.txt"
cp /tmp/backward.py.orig kda_trace/kernels/backward.py
