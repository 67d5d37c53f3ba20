#!/usr/bin/env bash
# Call 2: where the complete-shape fuzz spends its time with the step machine, and more programs.
set -uo pipefail
cd "$(dirname "$0")/.."
B=/tmp/smrun2; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun2/bin.tar.xz $B
L=/tmp/smlogs2; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1
SEED=${SEED:-0x17c0de2032}; FUZZT=${FUZZT:-300}
pids=()
for k in 0 1 2 3 4 5 6 7; do
  VYRE_CUDA_FUZZ_SHARD="$k/8" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-30)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz smlogs2
# The slowest programs again, one at a time, alone on the device.
seeds=$(grep -ho "slowest GPU checks.*" $L/fuzz/shard_*.log | grep -o '0x[0-9a-f]*' | head -16 | paste -sd, -)
echo "isolated: $seeds" >> $L/summary.txt
VYRE_CUDA_FUZZ_SEEDS=$seeds VYRE_CUDA_FUZZ_THREADS=1 VYRE_CUDA_FUZZ_SHAPE=complete VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved \
  timeout 100 $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/isolated.log 2>&1
echo "isolated rc=$?" >> $L/summary.txt
grep -h "^fuzz: " $L/isolated.log | grep -v "last backend metrics" >> $L/summary.txt
for s in $(echo $seeds | tr , ' ' | head -c 2000); do
  VYRE_CUDA_FUZZ_SEEDS=$s VYRE_CUDA_FUZZ_THREADS=1 VYRE_CUDA_FUZZ_SHAPE=complete timeout 20 $B/bin/gpu_fuzz --nocapture --test-threads=1 2>&1 | grep -o "worker time.*" | sed "s/^/$s /" >> $L/each.txt
done
tar -C /tmp -czf $OUT/logs.tgz smlogs2
cp $L/summary.txt $OUT/summary.txt
tail -40 $L/summary.txt; cat $L/each.txt
