#!/usr/bin/env bash
# Prepared for the next session's first call (nvidia-h200), emitter v20 (or any later tree whose
# PTX for these programs is unchanged): find the kernel behind call D's
# CUDA_ERROR_INVALID_ADDRESS_SPACE (shard 9/16 of seed 0x17c0de2040, reported at the
# synchronisation of 0xcd89444487b1d0ac, local program 1027; 0x59d49f9ee3ac9617, 1029, ran beside
# it on the other worker). As call 4 of fuzz-v17-2026-11-29 did for the illegal address:
#  1. the four programs 1026-1029 alone, natively, one worker;
#  2. the four under compute-sanitizer memcheck (one worker);
#  3. memcheck on the shard's last 300 programs up to 1029 (one worker);
#  4. the shard's first 1030 programs natively with 2 workers (it failed once in 1 run);
# beside them, from .smrun15 (HEAD, emitter v21 or later): the GPU suites one after another
# and the count's next part (seed $SEED, NF processes x 2 workers).
# Needs .smrun14/bin.tar.xz (gpu_fuzz of v20, 69987c0..cd95e80's tests: built from .smrun13)
# and .smrun15/bin.tar.xz (HEAD: gpu_fuzz, the suites below, vyre-cuda-jit).
# Usage on the device: OUT=$OUT SEED=0x17c0de2041 LIMIT=560 bash docs/gpu-runs/fuzz-v19-2026-11-29/next-run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/fv20n; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun14/bin.tar.xz $B
C=/tmp/fhead; rm -rf $C; mkdir -p $C
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun15/bin.tar.xz $C
L=/tmp/fv20nlogs; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1
CS=/usr/local/cuda/bin/compute-sanitizer
ALL=$(cat docs/gpu-runs/fuzz-v19-2026-11-29/seeds-2040-shard9.txt)
TRIO=0x454988c1a29cf40c,0xcd89444487b1d0ac,0x3852787525c48625,0x59d49f9ee3ac9617
LAST300=$(echo "$ALL" | tr ',' '\n' | tail -n 300 | paste -sd,)
FUZZT=$((${LIMIT:-560} - SECONDS)); echo "=== seed $SEED, fuzz deadline ${FUZZT} s" >> $L/summary.txt
NF=${NF:-12}; pids=()
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $C/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
(for t in fuzz_regressions gpu_semantics gpu_primitives gpu_libm_sweep gpu_jit_helper gpu_grid_sync gpu_async \
          driver_smoke gpu_artifact gpu_artifact_chain gpu_elementwise gpu_optimizer gpu_pipeline gpu_pool_release gpu_cluster; do
  s=$SECONDS
  VYRE_CUDA_FUZZ_REGRESSION_DIR=$PWD/tests/fuzz_regressions VYRE_CUDA_JIT_HELPER=$C/bin/vyre-cuda-jit \
    timeout 150 $C/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t (HEAD) rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "test result|panicked|FAILED|mismatch|replayed|differing" $L/$t.log | grep -v "byte-identical$" | head -8 >> $L/summary.txt
done) &
SUITES=$!
run() { # name seeds threads [memcheck]
  local pre=(); [ -n "${4:-}" ] && pre=($CS --tool memcheck --print-limit 10 --log-file $L/$1.san.txt)
  VYRE_CUDA_FUZZ_SEEDS=$2 VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_THREADS=$3 VYRE_CUDA_FUZZ_SHAPE=complete \
    VYRE_CUDA_FUZZ_SHRINK=0 timeout 200 "${pre[@]}" $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/$1.log 2>&1
  echo "=== $1 rc=$? $(grep -h 'programs run' $L/$1.log) $( [ -n "${4:-}" ] && grep -h 'ERROR SUMMARY' $L/$1.san.txt | head -1)" >> $L/summary.txt
  grep -h "FAIL" $L/$1.log | head -4 >> $L/summary.txt
}
for s in ${TRIO//,/ }; do run alone-$s $s 1; done
run trio-memcheck $TRIO 1 mc
run last300-memcheck $LAST300 1 mc &
MC=$!
for r in 1; do
  VYRE_CUDA_FUZZ_SHARD=9/16 VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete VYRE_CUDA_FUZZ_PROGRAMS=16480 \
    VYRE_CUDA_FUZZ_SEED=0x17c0de2040 VYRE_CUDA_FUZZ_SHRINK=0 timeout 200 \
    $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/replay$r.log 2>&1
  echo "=== replay$r rc=$? $(grep -h 'programs run' $L/replay$r.log)" >> $L/summary.txt
  grep -h "FAIL" $L/replay$r.log | head -4 >> $L/summary.txt
done
wait $MC
wait $SUITES
tar -C /tmp -czf $OUT/logs.tgz fv20nlogs
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv20nlogs; cp $L/summary.txt $OUT/summary.txt
grep -E "^===|FAIL|programs run|shard .* rc=[^0]|Invalid|ERROR" $L/summary.txt | head -80
