#!/usr/bin/env bash
# Session 36 call 4 (carry .whl and .gpu_out): the training definitions (kda_bwd_*, kda_gate_*) with the final
# kernels of #16, triton and the float64 reference, through benchmarks/gpu_dataset_run.sh into .gpu_out/run_s36:
# first every smoke workload, then as many of the rest as fit.
export SOLUTIONS="triton reference" RUN_DIR=.gpu_out/run_s36
bash benchmarks/gpu_dataset_run.sh 200 --name kda_bwd --name kda_gate --size smoke
bash benchmarks/gpu_dataset_run.sh 300 --name kda_bwd --name kda_gate --size all
