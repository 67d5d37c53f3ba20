#!/usr/bin/env bash
# Call 1 (nvidia-h200-x4): the looping vector entry (emitter v16). A/B of the AllReduce
# fold's blocks per SM (VYRE_CUDA_PEER_FOLD_BLOCKS_PER_SM: 0 = one pass, as v15), the
# 4-GPU cluster suite with every fold looping (1 block per SM), and the single-GPU suites
# touching the vector entry, one GPU each. Binaries: .x4run/bin.tar.xz (built here).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/x4run; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .x4run/bin.tar.xz $B
L=/tmp/x4logs1; rm -rf $L; mkdir -p $L
pack() { tar -C /tmp -czf $OUT/logs.tgz x4logs1; cp $L/summary.txt $OUT/summary.txt 2>/dev/null; }
{
  date -u; nvidia-smi -L; nvidia-smi topo -m
  echo "NCCL_* environment:"; env | grep '^NCCL_' | sort
} > $L/topology.txt 2>&1
export VYRE_CUDA_REQUIRE_GPU=1
for bp in 0 1 2 4 4 2 1 0; do
  s=$SECONDS
  VYRE_CUDA_PEER_FOLD_BLOCKS_PER_SM=$bp VYRE_BENCH_OPS=all_reduce VYRE_BENCH_MIN_BYTES=1048576 \
  VYRE_BENCH_MAX_BYTES=134217728 VYRE_BENCH_ITERS=100 VYRE_BENCH_OUT=$L/ab-$bp-$s.jsonl \
    timeout 90 $B/bin/bench_collectives > $L/ab-$bp-$s.log 2>&1
  echo "=== ab blocks/SM=$bp rc=$? $((SECONDS-s)) s" >> $L/summary.txt
  grep -E '^all_reduce' $L/ab-$bp-$s.log >> $L/summary.txt
done
pack
s=$SECONDS
VYRE_CUDA_PEER_FOLD_BLOCKS_PER_SM=1 VYRE_CUDA_REQUIRE_GPUS=4 timeout 200 $B/bin/gpu_cluster --nocapture --test-threads=1 > $L/gpu_cluster_w4_loop1.log 2>&1
echo "=== gpu_cluster W=4 blocks/SM=1 rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|W = |cases" $L/gpu_cluster_w4_loop1.log | head -20 >> $L/summary.txt
pack
s=$SECONDS
run1() { local gpu=$1; shift; for t in "$@"; do CUDA_VISIBLE_DEVICES=$gpu timeout 150 $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1; echo "=== $t rc=$? (GPU $gpu)" >> $L/single.txt; done; }
run1 0 gpu_elementwise gpu_pipeline & run1 1 gpu_semantics & run1 2 gpu_primitives & run1 3 fuzz_regressions driver_smoke &
wait
echo "=== single-GPU suites $((SECONDS-s)) s" >> $L/summary.txt
cat $L/single.txt >> $L/summary.txt
for t in gpu_elementwise gpu_pipeline gpu_semantics gpu_primitives fuzz_regressions driver_smoke; do
  grep -E "test result|panicked|FAILED|matched|cases run|replayed|fixtures" $L/$t.log | head -8 | sed "s/^/$t: /" >> $L/summary.txt
done
pack
tail -60 $L/summary.txt
