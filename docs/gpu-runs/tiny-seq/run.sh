#!/usr/bin/env bash
# GPU run for the tiny-seq branch: harness before/after, blocking-wait variants, GPU suites.
set -u
D=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/b && tar -C /tmp/b -xzf "$D/bin.tar.gz"
cd /tmp/b/bin
export VYRE_CUDA_REQUIRE_GPU=1 VYRE_AUTOTUNER=off
ROWS=tiny,warm_1024,resident_sequence_100
S=$OUT/tests.log
: > "$S"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } >> "$S" 2>&1
./vyre-compare-base --only $ROWS --json $OUT/before.json > $OUT/before.log 2>&1
./vyre-compare --only $ROWS,small --json $OUT/after.json --markdown $OUT/after.md > $OUT/after.log 2>&1
./vyre-compare --only tiny --ours-blocking-wait --json $OUT/blocking-wait.json > $OUT/blocking.log 2>&1
echo "==== --blocking-sync (context flag) ====" >> $OUT/blocking.log
./vyre-compare --only tiny --blocking-sync --json /tmp/bs.json >> $OUT/blocking.log 2>&1
for t in gpu_semantics gpu_resident gpu_async gpu_pipeline gpu_stress gpu_optimizer registration; do
  echo "==== $t ====" >> "$S"
  start=$(date +%s%N)
  ./$t --nocapture --test-threads=1 >> "$S" 2>&1
  rc=$?
  echo "==== $t rc=$rc wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" >> "$S"
  echo "$t rc=$rc"
done
for e in example_*; do
  echo "==== $e ====" >> "$S"
  ./$e >> "$S" 2>&1
  rc=$?
  echo "==== $e rc=$rc" >> "$S"
  echo "$e rc=$rc"
done
grep -E "^(tiny|tiny_cpu|warm_1024|resident_sequence_100) " $OUT/before.log $OUT/after.log | head -20
grep -E "small_dispatch_threshold:" $OUT/after.log
