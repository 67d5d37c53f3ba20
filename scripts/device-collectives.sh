#!/usr/bin/env bash
# The collective benchmark (benches/collectives.rs, `bench_collectives` in the bundle) on a
# multi-GPU machine: NCCL direct vs vyre's collectives (exact and native) on every visible
# GPU, in one process. From the repository root:
#   bash scripts/device-bundle.sh                  # here: builds .devrun/bin.tar.xz
#   bash scripts/device-collectives.sh             # there, with .devrun carried, e.g. on
#                                                  # nvidia-h100-x2 (then -x4 if lent)
# Writes into $OUT (or ./device-logs): topology.txt (date, nvidia-smi -L, GPU names and
# memory, `nvidia-smi topo -m`, the NCCL_* environment), collectives.log (the table and the
# target summary) and collectives.jsonl (a header, one line per row, a summary). Every
# NCCL_* and NVLink multicast setting stays as the machine has it. Passed through:
# VYRE_BENCH_MAX_BYTES (default 1 GiB), VYRE_BENCH_ITERS (default 20),
# VYRE_CUDA_COLLECTIVE_TIMEOUT_MS, VYRE_CUDA_PEER_BARRIER (memops | memops-each | events),
# VYRE_CUDA_PEER_FOLD_MIN_BYTES; VYRE_CUDA_STEP_TIMEOUT (default 540 s) bounds the run.
# Both peer barriers in one call, each into its own folder:
#   for b in events memops; do OUT=$OUT/$b VYRE_CUDA_PEER_BARRIER=$b VYRE_CUDA_STEP_TIMEOUT=270 \
#     bash scripts/device-collectives.sh; done
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/devrun-unpack.sh
out="${OUT:-device-logs}"; mkdir -p "$out"
{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  echo "NCCL_* environment:"; env | grep '^NCCL_' | sort || echo "  none set"
} > "$out/topology.txt" 2>&1
cat "$out/topology.txt"
VYRE_BENCH_OUT="$out/collectives.jsonl" timeout "${VYRE_CUDA_STEP_TIMEOUT:-540}" \
  "$bin_dir/bin/bench_collectives" > "$out/collectives.log" 2>&1
rc=$?
echo "=== bench_collectives rc=$rc" >> "$out/collectives.log"
grep -E "^GPUs|^NCCL |^exact cluster|skipped|FAIL|failed|: (MET|MISSED)|^measured|^  [a-z_]+ +exact:|rc=" \
  "$out/collectives.log" | head -80
exit $rc
