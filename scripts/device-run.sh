#!/usr/bin/env bash
# Run the bundle made by scripts/device-bundle.sh on a GPU machine. Every test runs with
# VYRE_CUDA_REQUIRE_GPU=1, so a missing device fails instead of skipping. Pass names to run
# a subset, in the order given (default: every binary of the manifest, benches last):
#   bash scripts/device-run.sh [gpu_semantics gpu_primitives ...]
# Each binary runs under `timeout $VYRE_CUDA_STEP_TIMEOUT` (default 300 s). Its log and a
# line in summary.txt go to a log folder that is packed into $OUT/logs.tgz after every
# binary, beside $OUT/summary.txt: the device tool returns at most 8 files, and what was
# done comes back even when the whole command is cut at its limit. Without $OUT the logs
# stay in ./device-logs. The collective benchmark alone on a multi-GPU kind, with the
# topology and its JSON lines: bash scripts/device-collectives.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/devrun-unpack.sh
export VYRE_CUDA_REQUIRE_GPU=1
step_timeout="${VYRE_CUDA_STEP_TIMEOUT:-300}"
logs="${OUT:+${TMPDIR:-/tmp}/vyre-cuda-logs}"; logs="${logs:-device-logs}"
mkdir -p "$logs"; summary="$logs/summary.txt"
pack() {
  [ -n "${OUT:-}" ] || return 0
  tar -C "$(dirname "$logs")" -czf "$OUT/logs.tgz" "$(basename "$logs")" && cp "$summary" "$OUT/summary.txt"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$summary" 2>&1 || true
names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(cut -d' ' -f1 .devrun/manifest | grep -v '^bench_'; cut -d' ' -f1 .devrun/manifest | grep '^bench_')
status=0
for bin in "${names[@]}"; do
  log="$logs/$bin.log"; started=$SECONDS
  case "$bin" in
    vyre-cuda-jit) continue ;;
    example_jit_isolation)
      # Each mode in its own fresh process, the driver's JIT cache disabled.
      for mode in in-process isolated in-process isolated; do
        CUDA_CACHE_DISABLE=1 VYRE_CUDA_JIT_HELPER="$bin_dir/bin/vyre-cuda-jit" \
          timeout "$step_timeout" "$bin_dir/bin/$bin" "$mode"
      done > "$log" 2>&1 ;;
    gpu_jit_helper)
      VYRE_CUDA_JIT_HELPER="$bin_dir/bin/vyre-cuda-jit" timeout "$step_timeout" \
        "$bin_dir/bin/$bin" --nocapture --test-threads=1 > "$log" 2>&1 ;;
    example_*|bench_*) timeout "$step_timeout" "$bin_dir/bin/$bin" > "$log" 2>&1 ;;
    *) timeout "$step_timeout" "$bin_dir/bin/$bin" --nocapture --test-threads=1 > "$log" 2>&1 ;;
  esac
  rc=$?
  [ $rc -eq 0 ] || status=1
  {
    echo "=== $bin rc=$rc $((SECONDS - started)) s"
    grep -E "test result|cases run|fixtures:|rejected for|panicked|skipped|match|p50|fuzz:|libm sweep|jit_isolation|first dispatches|device memory|JIT helper|crash-1|NCCL|: (MET|MISSED)" "$log" | grep -v "last backend metrics" | head -40
  } | tee -a "$summary"
  pack
done
exit $status
