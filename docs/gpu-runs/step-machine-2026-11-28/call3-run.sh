#!/usr/bin/env bash
# Call 3: step machine with atomics in subgroup operands; the complete-shape gate goes on;
# what a step-machine kernel costs to JIT and run, alone on the device.
set -uo pipefail
cd "$(dirname "$0")/.."
B=/tmp/smrun3; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun3/bin.tar.xz $B
L=/tmp/smlogs3; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1
SEED=${SEED:-0x17c0de2033}; FUZZT=${FUZZT:-430}
pids=()
for k in 0 1 2 3 4 5 6 7; do
  VYRE_CUDA_FUZZ_SHARD="$k/8" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-30)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for t in gpu_semantics fuzz_regressions; do
  s=$SECONDS
  timeout 200 $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E "test result|panicked|FAILED|mismatch|cases run|replayed" $L/$t.log | head -20 >> $L/summary.txt
done
s=$SECONDS
VYRE_CUDA_FUZZ_THREADS=4 timeout 250 $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/gpu_fuzz_default.log 2>&1
echo "=== gpu_fuzz default shape rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "^fuzz: " $L/gpu_fuzz_default.log | grep -v "last backend" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz smlogs3
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz smlogs3
# Alone, driver JIT cache disabled: JIT + run per program (step machine: the first four).
for s in 0xdb77fbcffb9e8dd9 0x4171b9b876f6f8af 0xac00609de89191d6 0x9ab85346d8bed634 0x5db1c3cff5354811 0x780cee619454d4f2 0xe06e44421e04d3ab 0xdfba6613819b6eed; do
  CUDA_CACHE_DISABLE=1 VYRE_CUDA_FUZZ_SEEDS=$s VYRE_CUDA_FUZZ_THREADS=1 VYRE_CUDA_FUZZ_SHAPE=complete timeout 20 $B/bin/gpu_fuzz --nocapture --test-threads=1 2>&1 | grep -o "slowest GPU checks.*" | sed "s/^/cold $s /" >> $L/each.txt
  VYRE_CUDA_FUZZ_SEEDS=$s,$s VYRE_CUDA_FUZZ_THREADS=1 VYRE_CUDA_FUZZ_SHAPE=complete timeout 20 $B/bin/gpu_fuzz --nocapture --test-threads=1 2>&1 | grep -o "slowest GPU checks.*" | sed "s/^/twice $s /" >> $L/each.txt
done
cat $L/each.txt >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz smlogs3
cp $L/summary.txt $OUT/summary.txt
tail -50 $L/summary.txt
