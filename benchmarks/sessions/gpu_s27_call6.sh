#!/usr/bin/env bash
# Twenty-seventh session, H100 (carry .whl and .gpu_out), about 9 min: the runner on the training definitions with
# the current kernels (#16's "done when": no UNSUPPORTED for triton): `kda-trace run --op-type kda` on kda_bwd_h32,
# kda_bwd_varlen_h32, kda_bwd_fused_h32 and both kda_gate definitions, triton and the reference, into
# .gpu_out/run_s27 (resumable), the report rendered. (kda_bwd_fused_h96's largest workloads need an H200.)
RUN_DIR=.gpu_out/run_s27 SOLUTIONS="triton reference" bash benchmarks/gpu_dataset_run.sh 540 --name kda_bwd_h32 \
    --name kda_bwd_varlen_h32 --name kda_bwd_fused_h32 --name kda_gate
