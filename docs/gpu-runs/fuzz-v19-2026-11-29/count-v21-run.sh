#!/usr/bin/env bash
# Calls F and G (2026-11-29, eighth session): the count of emitter v21 on its own, after
# next-run.sh (call E) had unpacked .smrun15 (HEAD's gpu_fuzz) to /tmp/fhead on the same warm
# machine. 16 processes x 2 workers, complete shape. Usage: SEED=0x17c0de2042 T=530 bash count-v21-run.sh
C=/tmp/fhead; L=/tmp/c2; rm -rf $L; mkdir -p $L/saved; export VYRE_CUDA_REQUIRE_GPU=1
NF=16; pids=()
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((T-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $T $C/bin/gpu_fuzz --nocapture --test-threads=1 > $L/shard_$k.log 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
tar -C /tmp -czf $OUT/logs2.tgz c2; cp $L/summary.txt $OUT/
