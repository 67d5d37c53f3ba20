#!/usr/bin/env bash
# Call 4: atomics in subgroup operands in lane order; the complete-shape gate on the final tree.
set -uo pipefail
cd "$(dirname "$0")/.."
B=/tmp/smrun4; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun4/bin.tar.xz $B
L=/tmp/smlogs4; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1
SEED=${SEED:-0x17c0de2034}; FUZZT=${FUZZT:-380}
pids=()
for k in 0 1 2 3 4 5 6 7; do
  VYRE_CUDA_FUZZ_SHARD="$k/8" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-30)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
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
VYRE_CUDA_FUZZ_SEEDS=0x12120ae19d152800,0x4f5af771b4a1deb9,0x6a32aa1233755737,0x6c80adace18c01b8,0x6dcda5c13b279e19,0x8d518dfec7e68c3f,0xa3d6bbc908588e2c,0xa407876825a568cc,0xa5dbf9d54b2cf2fd,0xea6ebd090a114532,0xec279447abdd069c VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete timeout 120 $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/replay_2033.log 2>&1
echo "=== replay of the 11 seed-2033 findings rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "^fuzz: " $L/replay_2033.log | grep -v "last backend" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz smlogs4
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz smlogs4
cp $L/summary.txt $OUT/summary.txt
tail -50 $L/summary.txt
