#!/usr/bin/env bash
# Twenty-ninth session, call 6 (H100; carry .whl and .gpu_out): the runner on the two backward definitions through
# the in-kernel gate, L2 norm and beta logits (outputs dA_log, ddt_bias: the gradients whose error the new
# tf32_rn diagonal blocks moved most), triton and the reference, into .gpu_out/run_s29 (the 65536-token workload
# of kda_bwd_fused_h96 needs an H200 for the reference and is not expected to be reached).
RUN_DIR=.gpu_out/run_s29 SOLUTIONS="triton reference" bash benchmarks/gpu_dataset_run.sh 300 \
    --name kda_bwd_fused_h96_d128_v_last_safe_gate --name kda_bwd_fused_h32_d128_v_last
