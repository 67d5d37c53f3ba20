#!/usr/bin/env bash
# Calls B, C... (nvidia-h200), emitter v19: the 10^5 count's next part, complete-shape fuzz only,
# NF processes x 2 workers, seed $SEED, until LIMIT seconds.
# Usage on the device: OUT=$OUT SEED=0x17c0de203b LIMIT=570 bash docs/gpu-runs/fuzz-v19-2026-11-29/count-run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/fv19; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" ${BUNDLE:-.smrun12}/bin.tar.xz $B
L=/tmp/fv19logs; rm -rf $L; mkdir -p $L/fuzz $L/saved
export VYRE_CUDA_REQUIRE_GPU=1
FUZZT=$((${LIMIT:-570} - SECONDS)); echo "=== seed $SEED, fuzz deadline ${FUZZT} s" >> $L/summary.txt
NF=${NF:-16}; pids=()
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv19logs; cp $L/summary.txt $OUT/summary.txt
grep -E "^===|programs run|shard .* rc=[^0]|FAIL" $L/summary.txt | head -60
