#!/usr/bin/env bash
# Prepared 2026-11-29 (eighth session) for the next session's first call (nvidia-h200, ~9 min):
#  1. the driver-JIT comparison of docs/gpu-runs/jit-time-2026-11-29/run.sh (.smrun16), GPU idle;
#  2. gpu_resident and gpu_stress alone (device-wide free-memory checks);
#  3. the other GPU suites of HEAD (.smrun17: raw-alias elements, raw operands, 16 new
#     semantic cases) one after another, beside
#  4. the complete-shape count on HEAD, seed $SEED, NF processes x 2 workers.
# Needs .smrun16/bundle.tar.xz and .smrun17/bin.tar.xz (scripts in .scratch: mkbundle17.sh).
# Usage on the device: OUT=$OUT SEED=0x17c0de2044 LIMIT=560 bash docs/gpu-runs/raw-operands-2026-11-29/next-run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
C=/tmp/fhead; rm -rf $C; mkdir -p $C
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun17/bin.tar.xz $C
L=/tmp/rologs; rm -rf $L; mkdir -p $L/fuzz $L/saved
OUT=$OUT bash docs/gpu-runs/jit-time-2026-11-29/run.sh > $L/jit_time_summary.txt 2>&1
echo "=== jit-time done at ${SECONDS} s" >> $L/summary.txt
export VYRE_CUDA_REQUIRE_GPU=1
cd $ROOT
suite() { # name
  local s=$SECONDS
  VYRE_CUDA_FUZZ_REGRESSION_DIR=$ROOT/tests/fuzz_regressions VYRE_CUDA_JIT_HELPER=$C/bin/vyre-cuda-jit \
    timeout 150 $C/bin/$1 --nocapture --test-threads=1 > $L/$1.log 2>&1
  echo "=== $1 rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "test result|panicked|FAILED|mismatch|failed|differing|semantic cases" $L/$1.log | grep -v "byte-identical$" | head -8 >> $L/summary.txt
}
suite gpu_resident; suite gpu_stress
FUZZT=$((${LIMIT:-560} - SECONDS)); echo "=== seed $SEED, fuzz deadline ${FUZZT} s" >> $L/summary.txt
NF=${NF:-12}; pids=()
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $C/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for t in gpu_semantics fuzz_regressions gpu_primitives gpu_libm_sweep gpu_half gpu_jit_helper gpu_grid_sync \
         gpu_async driver_smoke gpu_artifact gpu_artifact_chain gpu_elementwise gpu_optimizer gpu_pipeline \
         gpu_pool_release gpu_cluster; do
  suite $t
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz rologs; cp $L/summary.txt $OUT/summary.txt
grep -E "^===|FAIL|panicked|shard .* rc=[^0]|programs run|semantic cases" $L/summary.txt | head -80
sed -n '/fixed cost/,/^| module/p' $L/jit_time_summary.txt
