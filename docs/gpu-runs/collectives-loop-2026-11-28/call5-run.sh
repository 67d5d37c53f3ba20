#!/usr/bin/env bash
# Call 5 (nvidia-h200-x4): peer-synced folds (the fold kernels meet the other ranks
# themselves: VYRE_CUDA_PEER_SYNC=kernel, the new default) against the fold between two
# barriers of stream memory operations (=barriers). A/B on 4 and 2 GPUs (AllReduce and
# ReduceScatter 8 B .. 128 MiB, 3 rounds, mirrored order); the cluster suite at W = 4 and
# W = 2 with the default; then the whole benchmark at W = 4 and W = 2 (5 rounds).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/x4run5; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .x4run/bin.tar.xz $B
L=/tmp/x4logs5; rm -rf $L; mkdir -p $L
pack() { tar -C /tmp -czf $OUT/logs.tgz x4logs5; cp $L/summary.txt $OUT/summary.txt 2>/dev/null; }
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "NCCL_* environment:"; env | grep '^NCCL_' | sort; } > $L/topology.txt 2>&1
export VYRE_CUDA_REQUIRE_GPU=1
bench() { # name, then env assignments
  local name=$1; shift; local s=$SECONDS
  env "$@" VYRE_BENCH_OUT=$L/$name.jsonl timeout 120 $B/bin/bench_collectives > $L/$name.log 2>&1
  echo "=== $name rc=$? $((SECONDS-s)) s ($*)" >> $L/summary.txt
  grep -E "^(all_reduce|all_gather|reduce_scatter|broadcast) |: (MET|MISSED)|min ratio|FAIL" $L/$name.log >> $L/summary.txt
  pack
}
for m in kernel barriers barriers kernel; do
  bench w4-sync-$m-$SECONDS VYRE_CUDA_PEER_SYNC=$m VYRE_BENCH_OPS=all_reduce,reduce_scatter \
    VYRE_BENCH_MAX_BYTES=134217728 VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=3
done
s=$SECONDS
VYRE_CUDA_REQUIRE_GPUS=4 timeout 200 $B/bin/gpu_cluster --nocapture --test-threads=1 > $L/gpu_cluster_w4.log 2>&1
echo "=== gpu_cluster W=4 rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|W = 4:|fold cases" $L/gpu_cluster_w4.log | head -10 >> $L/summary.txt
pack
for m in kernel barriers barriers kernel; do
  bench w2-sync-$m-$SECONDS CUDA_VISIBLE_DEVICES=0,1 VYRE_CUDA_PEER_SYNC=$m VYRE_BENCH_OPS=all_reduce,reduce_scatter \
    VYRE_BENCH_MAX_BYTES=134217728 VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=3
done
s=$SECONDS
CUDA_VISIBLE_DEVICES=0,1 VYRE_CUDA_REQUIRE_GPUS=2 timeout 120 $B/bin/gpu_cluster --nocapture --test-threads=1 > $L/gpu_cluster_w2.log 2>&1
echo "=== gpu_cluster W=2 rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|W = 2:|fold cases" $L/gpu_cluster_w2.log | head -10 >> $L/summary.txt
pack
bench w4-full VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=5
bench w2-full CUDA_VISIBLE_DEVICES=0,1 VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=5
grep -E "^===|MET|MISSED|min ratio" $L/summary.txt
