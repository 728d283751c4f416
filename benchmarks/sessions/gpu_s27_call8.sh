#!/usr/bin/env bash
# Twenty-seventh session, H100 (carry .whl and .gpu_out with calls 6-7's run), about 3 min, what device time was
# left: the run resumed on kda_bwd_varlen_h32 (triton and the reference), as far as it gets.
RUN_DIR=.gpu_out/run_s27 SOLUTIONS="triton reference" bash benchmarks/gpu_dataset_run.sh 160 --name kda_bwd_varlen_h32
