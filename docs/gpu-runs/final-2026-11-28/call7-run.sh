#!/usr/bin/env bash
# Call 7 (nvidia-h200), emitter v17 (step machines evaluate side-effect-free subgroup
# operands every round): the two regression cases and the rest of fuzz_regressions, the
# semantic suite (the step-machine cases), the primitives corpus, and a complete-shape fuzz
# of the new tree (seed 0x17c0de2037, 8 processes x 2 workers) beside them.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/smrun5; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun5/bin.tar.xz $B
L=/tmp/smlogs7; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1 VYRE_CUDA_FUZZ_REGRESSION_DIR=$PWD/tests/fuzz_regressions
FUZZT=${FUZZT:-180}
pids=()
for k in 0 1 2 3 4 5 6 7; do
  VYRE_CUDA_FUZZ_SHARD="$k/8" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=${SEED:-0x17c0de2037} VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-30)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for t in fuzz_regressions gpu_semantics gpu_primitives gpu_grid_sync gpu_pipeline gpu_async driver_smoke; do
  s=$SECONDS
  timeout 120 $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "test result|panicked|FAILED|mismatch|cases|replayed|identical|redux" $L/$t.log | head -12 >> $L/summary.txt
done
tar -C /tmp -czf $OUT/logs.tgz smlogs7
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz smlogs7
cp $L/summary.txt $OUT/summary.txt
grep -E "^===|test result|programs run|shard|FAIL" $L/summary.txt | head -60
