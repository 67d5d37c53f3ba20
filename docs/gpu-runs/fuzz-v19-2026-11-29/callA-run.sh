#!/usr/bin/env bash
# Call A (nvidia-h200), emitter v19 (HEAD fe42f90; PTX byte-identical to 92947a0): first the
# measurements with the GPU otherwise idle, each a fresh process: the fixture corpus' driver JIT
# (CUDA_CACHE_DISABLE=1, empty HOME, `--only jit_probe`) of v19 and v17 (d6c06e0), the vyre-libs
# workloads (`--only libs`) of v19 and v17; then the 10^5 count's first part (complete-shape
# fuzz, NF processes x 2 workers, seed $SEED) with the GPU suites run one after another beside it.
# Usage on the device: OUT=$OUT SEED=0x17c0de203a LIMIT=570 bash docs/gpu-runs/fuzz-v19-2026-11-29/callA-run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/fv19; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun11/bin.tar.xz $B
L=/tmp/fv19logs; rm -rf $L; mkdir -p $L/fuzz $L/saved
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L/summary.txt
for v in v19 v17; do
  H=$(mktemp -d); s=$SECONDS; env HOME=$H CUDA_CACHE_DISABLE=1 timeout 80 $B/bin/vyre-compare-$v --only jit_probe \
    --json $L/jit-$v.json --markdown $L/jit-$v.md > $L/jit-$v.log 2>&1; echo "=== jit $v rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "corpus.load.(sum|median)|modules_over_2x" $L/jit-$v.log | sed "s/^/$v /" >> $L/summary.txt
done
for v in v19 v17; do
  s=$SECONDS; timeout 60 $B/bin/vyre-compare-$v --only libs --json $L/libs-$v.json --markdown $L/libs-$v.md > $L/libs-$v.log 2>&1
  echo "=== libs $v rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "_kernel .*vyre-cuda" $L/libs-$v.md | cut -d'|' -f2,4-6,10 | sed "s/^/$v /" >> $L/summary.txt
done
export VYRE_CUDA_REQUIRE_GPU=1 VYRE_CUDA_FUZZ_REGRESSION_DIR=$PWD/tests/fuzz_regressions
FUZZT=$((${LIMIT:-570} - SECONDS)); echo "=== seed $SEED, fuzz deadline ${FUZZT} s" >> $L/summary.txt
NF=${NF:-16}; pids=()
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for t in gpu_libm_sweep fuzz_regressions gpu_semantics gpu_primitives gpu_jit_helper gpu_grid_sync gpu_async driver_smoke \
         gpu_artifact gpu_artifact_chain gpu_elementwise gpu_half gpu_optimizer gpu_pipeline gpu_pool_release gpu_resident gpu_stress gpu_cluster; do
  [ $((FUZZT - SECONDS)) -lt 20 ] && { echo "=== $t not run (time)" >> $L/summary.txt; continue; }
  s=$SECONDS
  VYRE_CUDA_JIT_HELPER=$B/bin/vyre-cuda-jit timeout $((FUZZT - SECONDS - 10)) $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "test result|panicked|FAILED|mismatch|cases|replayed|failing|differ" $L/$t.log | grep -v "byte-identical$" | head -12 >> $L/summary.txt
done
grep -c "byte-identical$" $L/gpu_primitives.log | sed 's/^/gpu_primitives byte-identical cases: /' >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv19logs
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv19logs; cp $L/summary.txt $OUT/summary.txt
grep -E "^===|test result|programs run|shard .* rc=[^0]|FAIL|byte-identical cases|differing|^v1" $L/summary.txt | head -120
