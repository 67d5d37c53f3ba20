#!/usr/bin/env bash
# Prepared for the next session (not run: the device time was spent), emitter v19 (v18 + tanhf calls expm1f once: one inlined copy instead
# of three): the libm sweep, fuzz_regressions, gpu_semantics, gpu_primitives; the vyre-libs
# rows that use libm (gelu, swiglu, softmax, flash attention), v19 then v17 (d6c06e0), each
# a fresh process; a short complete-shape fuzz of v19 (seed 0x17c0de203a) beside them.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/fv19; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun10/bin.tar.xz $B
L=/tmp/fv19logs; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1 VYRE_CUDA_FUZZ_REGRESSION_DIR=$PWD/tests/fuzz_regressions
FUZZT=$((${LIMIT:-95} - SECONDS)); NF=${NF:-12}
pids=()
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=${SEED:-0x17c0de203a} VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-25)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=10 \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for t in gpu_libm_sweep fuzz_regressions gpu_semantics gpu_primitives; do
  s=$SECONDS; timeout 60 $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "test result|panicked|FAILED|mismatch|cases|replayed|failing|differing" $L/$t.log | grep -v "byte-identical$" | head -16 >> $L/summary.txt
done
grep -c "byte-identical$" $L/gpu_primitives.log | sed 's/^/gpu_primitives byte-identical cases: /' >> $L/summary.txt
for v in v19 v17; do
  timeout 40 $B/bin/vyre-compare-$v --only libs_gelu,libs_swiglu,libs_softmax,libs_flash_attention \
    --json $L/libs-$v.json --markdown $L/libs-$v.md > $L/libs-$v.log 2>&1; echo "=== libs $v rc=$?" >> $L/summary.txt
  grep -E "_kernel .*vyre-cuda" $L/libs-$v.md | cut -d'|' -f2,4-6 | sed "s/^/$v /" >> $L/summary.txt
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv19logs; cp $L/summary.txt $OUT/summary.txt
grep -E "^===|test result|programs run|shard .* rc=[^0]|FAIL|byte-identical cases|differing|^v1" $L/summary.txt | head -70
