#!/usr/bin/env bash
# The large differential fuzz run on a GPU machine: runs the bundled `gpu_fuzz` binary (made by
# scripts/device-bundle.sh) as SHARDS concurrent processes, each taking programs i with
# i % SHARDS == k, and sums their results into $OUT/fuzz_summary.txt.
#   bash scripts/device-fuzz.sh [programs] [seconds] [shards] [base-seed]
# Defaults: 112000 programs, 270 s per shard, 16 shards (2 worker threads each), the fuzzer's
# default seed. A shard stops taking programs at the deadline, so the run ends on time.
set -uo pipefail
cd "$(dirname "$0")/.."
programs="${1:-112000}"; seconds="${2:-270}"; shards="${3:-16}"; seed="${4:-}"
. scripts/devrun-unpack.sh
out="${OUT:-device-logs}"; mkdir -p "$out/fuzz"
export VYRE_CUDA_REQUIRE_GPU=1 VYRE_CUDA_FUZZ_PROGRAMS="$programs" VYRE_CUDA_FUZZ_SECONDS="$seconds"
export VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SAVE_DIR="$out/fuzz"
[ -n "$seed" ] && export VYRE_CUDA_FUZZ_SEED="$seed"
pids=()
for k in $(seq 0 $((shards - 1))); do
  # Odd shards run every elementwise launch through the vector entry (the default keeps
  # launches under 2^16 invocations, i.e. nearly all fuzz programs, on the scalar entry).
  vector_min=$([ $((k % 2)) -eq 1 ] && echo 0 || echo 65536)
  VYRE_CUDA_VECTOR_MIN_INVOCATIONS="$vector_min" VYRE_CUDA_FUZZ_SHARD="$k/$shards" \
    "$bin_dir/bin/gpu_fuzz" --nocapture --test-threads=1 > "$out/fuzz/shard_$k.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
summary="$out/fuzz_summary.txt"
grep -h "^fuzz: " "$out"/fuzz/shard_*.log | grep -v "last backend metrics" > "$summary"
awk '/^fuzz: [0-9]+ programs run/ { run += $2; mis += $5; rej += $7 }
     END { printf "fuzz total: %d programs run, %d mismatches, %d rejected\n", run, mis, rej }' \
  "$summary" | tee -a "$summary"
grep -h "test result" "$out"/fuzz/shard_*.log | sort | uniq -c | tee -a "$summary"
# Only 8 files come back from the device: keep the summary and the per-shard logs as one archive.
tar -C "$out" -czf "$out/fuzz_logs.tar.gz" fuzz && rm -rf "$out/fuzz"
exit $status
