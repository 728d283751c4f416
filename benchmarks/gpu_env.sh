# The device environment for the benchmarks: source it on a GPU machine, from the repository root, before running
# any benchmarks/*.py there (`source benchmarks/gpu_env.sh; python3 benchmarks/bench_chunk.py ...`; $OUT names a
# folder for its files). It installs the wheels carried in .whl (and .whl_test, the test packages, if the image
# lacks them) into /tmp/site, imports kda_trace from the checkout, keeps Triton's cache (with fla's autotuning
# results) under .gpu_out/triton, and writes the machine and versions (GPU, driver, Python, torch, CUDA, Triton,
# fla-core) to $OUT/env_HHMMSS.txt: the versions each table of benchmarks/RESULTS.md gives.
# TRITON_CACHE_DIR set by the caller is kept (two runs side by side on two GPUs: give each its own copy).
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl $(ls .whl_test/*.whl 2>/dev/null)
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/.gpu_out/triton}
mkdir -p "$TRITON_CACHE_DIR"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
    python3 -m pip list 2>/dev/null | grep -iE "^(pytest|pytest-xdist|hypothesis|fla-core|rich|numpy|safetensors|pydantic) "
    nproc
} > "$OUT/env_$(date +%H%M%S).txt" 2>&1
# fla's autotuning results come back in $OUT/autotune.tar.gz on exit; unpack them into .gpu_out/triton here
# (tar xzf autotune.tar.gz -C .gpu_out/triton) and carry .gpu_out (git ignores it) with the next run, which then
# skips fla's first-use tuning: about ten minutes on a fresh H200 for the four training configurations.
# Past 8 files in $OUT, the text files are packed into texts.tar.gz (fewer files to copy back).
trap '(cd "$TRITON_CACHE_DIR" && find . -name "*.autotune.json" | tar czf "$OUT/autotune.tar.gz" -T -)
      if [ "$(find "$OUT" -type f | wc -l)" -gt 8 ]; then
          (cd "$OUT" && find . -name "*.txt" | tar czf texts.tar.gz -T - --remove-files)
      fi' EXIT
