#!/usr/bin/env bash
# One device call (nvidia-h200), tree d6c06e0 (emitter v17 + the lane-turn and 16-byte operand
# lowering): issue 17's complete-shape fuzz, 16 processes x 2 workers on the one GPU, for the
# whole call; with SUITE=1 the single-GPU suites run beside it first (the 9 semantic cases of
# cc4e070/cc9788b have not run on a GPU before).
# Usage on the device: OUT=$OUT SEED=0x17c0de2038 SUITE=1 bash docs/gpu-runs/fuzz-v17-2026-11-29/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/fv17; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun6/bin.tar.xz $B
L=/tmp/fv17logs; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1 VYRE_CUDA_FUZZ_REGRESSION_DIR=$PWD/tests/fuzz_regressions
FUZZT=$((${LIMIT:-575} - SECONDS)); echo "=== seed $SEED, fuzz deadline ${FUZZT} s from t=${SECONDS}" >> $L/summary.txt
nvidia-smi -L >> $L/summary.txt
pids=()
for k in $(seq 0 15); do
  VYRE_CUDA_FUZZ_SHARD="$k/16" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
if [ "${SUITE:-0}" = 1 ]; then
  for t in fuzz_regressions gpu_semantics gpu_primitives gpu_jit_helper gpu_grid_sync gpu_async driver_smoke; do
    s=$SECONDS
    VYRE_CUDA_JIT_HELPER=$B/bin/vyre-cuda-jit timeout 150 $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
    echo "=== $t rc=$? $((SECONDS-s)) s" >> $L/summary.txt
    grep -E "test result|panicked|FAILED|mismatch|cases|replayed|failing" $L/$t.log | grep -v "byte-identical$" | head -12 >> $L/summary.txt
  done
  grep -c "byte-identical$" $L/gpu_primitives.log | sed 's/^/gpu_primitives byte-identical cases: /' >> $L/summary.txt
  tar -C /tmp -czf $OUT/logs.tgz fv17logs
fi
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv17logs; cp $L/summary.txt $OUT/summary.txt
grep -E "^===|test result|programs run|shard .* rc=[^0]|FAIL|byte-identical cases" $L/summary.txt | head -80
