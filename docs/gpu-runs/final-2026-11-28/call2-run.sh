#!/usr/bin/env bash
# Call 2 (nvidia-h200-x2), tree f83a835: issue 17's complete-shape fuzz, seed 0x17c0de2036,
# 16 processes x 2 workers, 8 per GPU, for the whole call.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/frun2; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .x4run/bin.tar.xz $B
L=/tmp/flogs2; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1
FUZZT=$((575 - SECONDS)); echo "=== fuzz deadline ${FUZZT} s from t=${SECONDS}" >> $L/summary.txt
pids=()
for k in $(seq 0 15); do
  CUDA_VISIBLE_DEVICES=$((k % 2)) VYRE_CUDA_FUZZ_SHARD="$k/16" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=${SEED:-0x17c0de2036} VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz flogs2; cp $L/summary.txt $OUT/summary.txt
grep -E "^===|programs run|shard" $L/summary.txt | head -60
