# Sourced by benchmarks/gpu_*.sh and benchmarks/sessions/gpu_s*.sh on the GPU machine (repository root, .whl carried, and .whl_test if the image lacks a test package): installs the
# wheels into /tmp/site, imports from the checkout, keeps Triton's cache (with fla's autotuning results) under
# .gpu_out/triton, and writes the machine and versions to $OUT/env_HHMMSS.txt.
# TRITON_CACHE_DIR set by the caller is kept (two scripts side by side on two GPUs: give each its own copy).
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
# so the next call skips the minutes of first-use tuning (tar xzf autotune.tar.gz -C .gpu_out/triton).
# The device tool returns at most 8 files from $OUT: past that, the text files go back packed in texts.tar.gz.
trap '(cd "$TRITON_CACHE_DIR" && find . -name "*.autotune.json" | tar czf "$OUT/autotune.tar.gz" -T -)
      if [ "$(find "$OUT" -type f | wc -l)" -gt 8 ]; then
          (cd "$OUT" && find . -name "*.txt" | tar czf texts.tar.gz -T - --remove-files)
      fi' EXIT
