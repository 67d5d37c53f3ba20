#!/usr/bin/env bash
# Ninth session (2026-11-29), third device call (nvidia-h200, ~8 min), binaries of HEAD in
# .smrun18/bin.tar.xz (.scratch/mkbundle18.sh), after call 2 found two races in the new
# raw-element tests (fuzz generator: RawCopy forms mixed in one program; semantic cases
# reading the buffer other invocations write) and bytes loads became subgroup operands:
#  1. gpu_resident and gpu_stress alone (with the JIT helper);
#  2. gpu_semantics (506 cases, incl. the packed/general/blocking-wait agreement),
#     fuzz_regressions, gpu_primitives, gpu_elementwise, gpu_pipeline, gpu_artifact,
#     gpu_async, gpu_grid_sync, driver_smoke, beside
#  3. the complete-shape count with the fixed RawCopy, seed $SEED.
# Usage on the device: OUT=$OUT SEED=0x17c0de2046 LIMIT=470 bash docs/gpu-runs/elements-2026-11-29/run3.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
C=/tmp/fhead; rm -rf $C; mkdir -p $C
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun18/bin.tar.xz $C
L=/tmp/el3logs; rm -rf $L; mkdir -p $L/fuzz $L/saved
S=$L/summary.txt
export VYRE_CUDA_REQUIRE_GPU=1 VYRE_CUDA_JIT_HELPER=$C/bin/vyre-cuda-jit
suite() { # name
  local t=$1 s=$SECONDS
  VYRE_CUDA_FUZZ_REGRESSION_DIR=$ROOT/tests/fuzz_regressions timeout 150 $C/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t rc=$? $((SECONDS-s)) s" >> $S
  grep -E "test result|panicked|FAILED|mismatch|failed|differing|semantic cases|cases x2|shutdown: free|stress memory|corpus fixtures" $L/$t.log | grep -v "byte-identical$" | head -8 >> $S
}
suite gpu_resident; suite gpu_stress
FUZZT=$((${LIMIT:-470} - SECONDS)); echo "=== seed $SEED, fuzz deadline ${FUZZT} s" >> $S
NF=${NF:-12}; pids=()
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $C/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for t in gpu_semantics fuzz_regressions gpu_primitives gpu_elementwise gpu_pipeline gpu_artifact gpu_async \
         gpu_grid_sync driver_smoke; do
  suite $t
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $S; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $S
tar -C /tmp -czf $OUT/logs.tgz el3logs; cp $S $OUT/summary.txt
grep -E "^===|FAIL|panicked|shard .* rc=[^0]|programs run|semantic cases|cases x2|shutdown: free|stress memory" $S | head -80
