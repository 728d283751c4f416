#!/usr/bin/env bash
# Twenty-eighth session, call 8 (H100; carry .whl and .gpu_out): the runner on the dense and packed backward
# definitions with this session's kernels (register caps, `_local_vk_kernel` on 32 x 32 tiles): `kda-trace run`
# on kda_bwd_h32 and kda_bwd_varlen_h32, triton and the reference, into .gpu_out/run_s28 (resumable), as far as
# the remaining device time goes.
RUN_DIR=.gpu_out/run_s28 SOLUTIONS="triton reference" bash benchmarks/gpu_dataset_run.sh 400 --name kda_bwd_h32 \
    --name kda_bwd_varlen_h32
