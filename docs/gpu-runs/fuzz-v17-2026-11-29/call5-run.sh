#!/usr/bin/env bash
# Call 5 (nvidia-h200), emitter v18 (libm routines inlined, no .func/call): the failing pair
# of call 4 (0x1e73b106ca1fcb02 then 0xc9c648eaeac04c4f) and all 307 programs of shard 59/64
# under memcheck; shard 11/16's first 1240 programs natively with 2 workers (twice; it
# failed 2 of 3 times on v17); the single-GPU suites (gpu_libm_sweep: the inlined ports on
# 2^24 inputs each); and the complete-shape fuzz of v18 beside them for the rest of the call.
# Usage on the device: OUT=$OUT SEED=0x17c0de2039 LIMIT=560 bash docs/gpu-runs/fuzz-v17-2026-11-29/call5-run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/fv18; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun8/bin.tar.xz $B
L=/tmp/fv18logs; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1 VYRE_CUDA_FUZZ_REGRESSION_DIR=$PWD/tests/fuzz_regressions
CS=/usr/local/cuda/bin/compute-sanitizer
FUZZT=$((${LIMIT:-560} - SECONDS)); echo "=== seed $SEED, fuzz deadline ${FUZZT} s" >> $L/summary.txt
NF=${NF:-13}
pids=()
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
ALL=$(cat .smrun8/cases/seeds-59-64.txt)
mc() { # name seeds
  VYRE_CUDA_FUZZ_SEEDS=$2 VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_THREADS=1 VYRE_CUDA_FUZZ_SHAPE=complete \
    VYRE_CUDA_FUZZ_SHRINK=0 timeout 200 $CS --tool memcheck --print-limit 10 --log-file $L/$1.san.txt \
    $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/$1.log 2>&1
  echo "=== $1 rc=$? $(grep -c 'Invalid' $L/$1.san.txt) invalid; $(grep -h 'ERROR SUMMARY' $L/$1.san.txt | head -1); $(grep -h 'programs run' $L/$1.log)" >> $L/summary.txt
}
mc pair 0x1e73b106ca1fcb02,0xc9c648eaeac04c4f
mc all307 $ALL &
for r in 1 2; do
  VYRE_CUDA_FUZZ_SHARD=11/16 VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete VYRE_CUDA_FUZZ_PROGRAMS=19840 \
    VYRE_CUDA_FUZZ_SEED=0x17c0de2038 VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved/replay$r timeout 200 \
    $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/replay$r.log 2>&1
  echo "=== replay$r rc=$? $(grep -h 'programs run' $L/replay$r.log)" >> $L/summary.txt
done
for t in fuzz_regressions gpu_semantics gpu_primitives gpu_libm_sweep gpu_jit_helper gpu_grid_sync gpu_async driver_smoke; do
  s=$SECONDS
  VYRE_CUDA_JIT_HELPER=$B/bin/vyre-cuda-jit timeout 150 $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "test result|panicked|FAILED|mismatch|cases|replayed|failing|differ" $L/$t.log | grep -v "byte-identical$" | head -12 >> $L/summary.txt
done
grep -c "byte-identical$" $L/gpu_primitives.log | sed 's/^/gpu_primitives byte-identical cases: /' >> $L/summary.txt
wait %1 2>/dev/null
tar -C /tmp -czf $OUT/logs.tgz fv18logs
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
wait
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv18logs; cp $L/summary.txt $OUT/summary.txt
grep -E "^===|test result|programs run|shard .* rc=[^0]|FAIL|byte-identical cases" $L/summary.txt | head -80
