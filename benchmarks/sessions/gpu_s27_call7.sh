#!/usr/bin/env bash
# Twenty-seventh session, H100 (carry .whl and .gpu_out with call 6's run in .gpu_out/run_s27), about 7 min, the
# session's last device time: call 6's run resumed on kda_bwd_h32 and both kda_gate definitions (triton and the
# reference).
RUN_DIR=.gpu_out/run_s27 SOLUTIONS="triton reference" bash benchmarks/gpu_dataset_run.sh 370 --name kda_bwd_h32 \
    --name kda_gate
