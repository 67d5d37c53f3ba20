#!/usr/bin/env bash
# Run the bundle made by scripts/device-bundle.sh on a GPU machine. Every test runs with
# VYRE_CUDA_REQUIRE_GPU=1, so a missing device fails instead of skipping. Logs go to
# $OUT (or ./device-logs). Pass names to run a subset: bash scripts/device-run.sh gpu_semantics
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/devrun-unpack.sh
out="${OUT:-device-logs}"; mkdir -p "$out"
export VYRE_CUDA_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
status=0
for bin in $(cut -d' ' -f1 .devrun/manifest); do
  if [ $# -gt 0 ] && [[ " $* " != *" $bin "* ]]; then continue; fi
  echo "=== $bin"
  case "$bin" in
    vyre-cuda-jit) continue ;;
    example_jit_isolation)
      # Each mode in its own fresh process, the driver's JIT cache disabled.
      for mode in in-process isolated in-process isolated; do
        CUDA_CACHE_DISABLE=1 VYRE_CUDA_JIT_HELPER="$bin_dir/bin/vyre-cuda-jit" "$bin_dir/bin/$bin" "$mode"
      done > "$out/$bin.log" 2>&1 ;;
    gpu_jit_helper)
      VYRE_CUDA_JIT_HELPER="$bin_dir/bin/vyre-cuda-jit" "$bin_dir/bin/$bin" --nocapture --test-threads=1 > "$out/$bin.log" 2>&1 ;;
    example_*|bench_*) "$bin_dir/bin/$bin" > "$out/$bin.log" 2>&1 ;;
    *) "$bin_dir/bin/$bin" --nocapture --test-threads=1 > "$out/$bin.log" 2>&1 ;;
  esac
  rc=$?
  [ $rc -eq 0 ] || status=1
  echo "rc=$rc"
  grep -E "test result|cases run|fixtures:|rejected for|panicked|skipped|match|p50|fuzz:|libm sweep|jit_isolation|first dispatches|device memory|JIT helper|crash-1" "$out/$bin.log" | head -40
done
exit $status
