#!/usr/bin/env bash
# Call 2 (nvidia-h200-x4): the committed default (the AllReduce fold on 1 block per SM).
# 1. The whole collective benchmark on 4 GPUs (all four collectives, 8 B .. 1 GiB,
#    100 iterations per round, 3 rounds with the series interleaved, median round).
# 2. Two GPUs (CUDA_VISIBLE_DEVICES=0,1): AllReduce A/B of the fold's blocks per SM
#    (0 = one pass, 1 = the default) from 1 MiB, then the whole benchmark.
# 3. The cluster suite at W = 2 and the cluster example at W = 4.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/x4run2; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .x4run/bin.tar.xz $B
L=/tmp/x4logs2; rm -rf $L; mkdir -p $L
pack() { tar -C /tmp -czf $OUT/logs.tgz x4logs2; cp $L/summary.txt $OUT/summary.txt 2>/dev/null; }
{
  date -u; nvidia-smi -L; nvidia-smi topo -m
  echo "NCCL_* environment:"; env | grep '^NCCL_' | sort
} > $L/topology.txt 2>&1
export VYRE_CUDA_REQUIRE_GPU=1
bench() { # name, then env assignments
  local name=$1; shift; local s=$SECONDS
  env "$@" VYRE_BENCH_OUT=$L/$name.jsonl timeout 260 $B/bin/bench_collectives > $L/$name.log 2>&1
  echo "=== $name rc=$? $((SECONDS-s)) s ($*)" >> $L/summary.txt
  grep -E "^(all_reduce|all_gather|reduce_scatter|broadcast) |: (MET|MISSED)|min ratio" $L/$name.log >> $L/summary.txt
  pack
}
bench w4-full VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=3
for bp in 0 1; do
  bench w2-ab-$bp CUDA_VISIBLE_DEVICES=0,1 VYRE_CUDA_PEER_FOLD_BLOCKS_PER_SM=$bp VYRE_BENCH_OPS=all_reduce \
    VYRE_BENCH_MIN_BYTES=1048576 VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=3
done
bench w2-full CUDA_VISIBLE_DEVICES=0,1 VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=3
s=$SECONDS
CUDA_VISIBLE_DEVICES=0,1 VYRE_CUDA_REQUIRE_GPUS=2 timeout 150 $B/bin/gpu_cluster --nocapture --test-threads=1 > $L/gpu_cluster_w2.log 2>&1
echo "=== gpu_cluster W=2 rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|W = 2:|fold cases" $L/gpu_cluster_w2.log | head -10 >> $L/summary.txt
s=$SECONDS
timeout 60 $B/bin/example_cluster > $L/example_cluster.log 2>&1
echo "=== example_cluster rc=$? $((SECONDS-s)) s" >> $L/summary.txt
tail -5 $L/example_cluster.log >> $L/summary.txt
pack
grep -E "^===|MET|MISSED|min ratio" $L/summary.txt
