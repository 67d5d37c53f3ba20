#!/usr/bin/env bash
# Call 1: step machine (emitter v15) on the GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
B=/tmp/smrun; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun/bin.tar.xz $B
L=/tmp/smlogs; rm -rf $L; mkdir -p $L/fuzz $L/saved
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/device.txt
export VYRE_CUDA_REQUIRE_GPU=1
SEED=${SEED:-0x17c0de2031}; PER=${PER:-3750}; FUZZT=${FUZZT:-430}
pids=()
for k in 0 1 2 3 4 5 6 7; do
  VYRE_CUDA_FUZZ_SHARD="$k/8" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=$((PER*8)) VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-30)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for t in ${TESTS:-gpu_semantics fuzz_regressions gpu_async gpu_grid_sync gpu_pipeline gpu_primitives}; do
  s=$SECONDS
  timeout ${STEPT:-200} $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "test result|panicked|FAILED|mismatch|cases run" $L/$t.log | head -20 >> $L/summary.txt
  tar -C /tmp -czf $OUT/logs.tgz smlogs
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz smlogs
cp $L/summary.txt $OUT/summary.txt
cat $L/summary.txt | tail -60
