#!/usr/bin/env bash
# Ninth session (2026-11-29), second device call (nvidia-h200, ~9.5 min), binaries of HEAD
# in .smrun18/bin.tar.xz (.scratch/mkbundle18.sh: every GPU test, the JIT helper,
# vyre-compare):
#  1. vyre-compare --only tiny,warm,vadd,saxpy,resident (dispatch-path rows after the
#     plan's element counting changed), the GPU otherwise idle;
#  2. gpu_resident and gpu_stress alone, with VYRE_CUDA_JIT_HELPER set (call 1 failed them:
#     the helper's CUDA context outlived shutdown) and without;
#  3. every GPU suite one after another (gpu_semantics: 499 cases, the 13 new ones prove the
#     4-bit, vector, array and device-mesh lowering), beside
#  4. the complete-shape count with raw-element copies in the generator, seed $SEED.
# Usage on the device: OUT=$OUT SEED=0x17c0de2045 LIMIT=565 bash docs/gpu-runs/elements-2026-11-29/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
C=/tmp/fhead; rm -rf $C; mkdir -p $C
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun18/bin.tar.xz $C
L=/tmp/ellogs; rm -rf $L; mkdir -p $L/fuzz $L/saved
S=$L/summary.txt
(cd /tmp && VYRE_AUTOTUNER=off HOME=$(mktemp -d) timeout 150 $C/bin/vyre-compare --only tiny,warm,vadd,saxpy,resident \
   --deadline-s 110 --json $L/bench.json --markdown $L/bench.md > $L/bench.log 2>&1; echo "=== bench rc=$? at ${SECONDS} s" >> $S)
export VYRE_CUDA_REQUIRE_GPU=1
suite() { # name [env...]
  local t=$1; shift; local s=$SECONDS
  env "$@" VYRE_CUDA_FUZZ_REGRESSION_DIR=$ROOT/tests/fuzz_regressions \
    timeout 150 $C/bin/$t --nocapture --test-threads=1 > $L/$t$TAG.log 2>&1
  echo "=== $t$TAG rc=$? $((SECONDS-s)) s" >> $S
  grep -E "test result|panicked|FAILED|mismatch|failed|differing|semantic cases|shutdown: free|stress memory" $L/$t$TAG.log | grep -v "byte-identical$" | head -8 >> $S
}
TAG=-helper suite gpu_resident VYRE_CUDA_JIT_HELPER=$C/bin/vyre-cuda-jit
TAG=-helper suite gpu_stress VYRE_CUDA_JIT_HELPER=$C/bin/vyre-cuda-jit
TAG= suite gpu_resident; TAG= suite gpu_stress
FUZZT=$((${LIMIT:-565} - SECONDS)); echo "=== seed $SEED, fuzz deadline ${FUZZT} s" >> $S
NF=${NF:-12}; pids=()
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $C/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
TAG=
for t in gpu_semantics fuzz_regressions gpu_primitives gpu_elementwise gpu_pipeline gpu_artifact gpu_artifact_chain \
         gpu_async gpu_grid_sync driver_smoke gpu_optimizer gpu_pool_release gpu_cluster gpu_libm_sweep gpu_half; do
  suite $t VYRE_CUDA_JIT_HELPER=$C/bin/vyre-cuda-jit
done
TAG= suite gpu_jit_helper VYRE_CUDA_JIT_HELPER=$C/bin/vyre-cuda-jit
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $S; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $S
tar -C /tmp -czf $OUT/logs.tgz ellogs; cp $S $OUT/summary.txt; cp $L/bench.md $OUT/ 2>/dev/null
grep -E "^===|FAIL|panicked|shard .* rc=[^0]|programs run|semantic cases|shutdown: free|stress memory" $S | head -80
