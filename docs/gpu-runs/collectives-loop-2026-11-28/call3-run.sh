#!/usr/bin/env bash
# Call 3 (nvidia-h200-x4): the ReduceScatter fold's blocks per SM
# (VYRE_CUDA_PEER_SCATTER_BLOCKS_PER_SM), A/B on 4 and 2 GPUs (RS only, 1 MiB .. 128 MiB,
# 3 rounds, each value twice in mirrored order); the value with the smallest summed
# exact time at 4 GPUs then runs the whole benchmark (5 rounds) and the 4-GPU cluster
# suite (it is the committed default afterwards).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/x4run3; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .x4run/bin.tar.xz $B
L=/tmp/x4logs3; rm -rf $L; mkdir -p $L
pack() { tar -C /tmp -czf $OUT/logs.tgz x4logs3; cp $L/summary.txt $OUT/summary.txt 2>/dev/null; }
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "NCCL_* environment:"; env | grep '^NCCL_' | sort; } > $L/topology.txt 2>&1
export VYRE_CUDA_REQUIRE_GPU=1
bench() { # name, then env assignments
  local name=$1; shift; local s=$SECONDS
  env "$@" VYRE_BENCH_OUT=$L/$name.jsonl timeout 200 $B/bin/bench_collectives > $L/$name.log 2>&1
  echo "=== $name rc=$? $((SECONDS-s)) s ($*)" >> $L/summary.txt
  grep -E "^(all_reduce|all_gather|reduce_scatter|broadcast) |: (MET|MISSED)|min ratio" $L/$name.log >> $L/summary.txt
  pack
}
for bp in 0 1 2 4 4 2 1 0; do
  bench w4-rs-$bp-$SECONDS VYRE_CUDA_PEER_SCATTER_BLOCKS_PER_SM=$bp VYRE_BENCH_OPS=reduce_scatter \
    VYRE_BENCH_MIN_BYTES=1048576 VYRE_BENCH_MAX_BYTES=134217728 VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=3
done
for bp in 0 1 1 0; do
  bench w2-rs-$bp-$SECONDS CUDA_VISIBLE_DEVICES=0,1 VYRE_CUDA_PEER_SCATTER_BLOCKS_PER_SM=$bp VYRE_BENCH_OPS=reduce_scatter \
    VYRE_BENCH_MIN_BYTES=1048576 VYRE_BENCH_MAX_BYTES=134217728 VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=3
done
best=$(python3 - "$L" <<'PY'
import glob, json, sys
sums = {}
for path in glob.glob(sys.argv[1] + "/w4-rs-*.jsonl"):
    bp = path.split("/")[-1].split("-")[2]
    for line in open(path):
        row = json.loads(line)
        if row.get("type") == "row" and row["us"].get("exact"):
            sums.setdefault(bp, 0.0)
            sums[bp] += row["us"]["exact"]
print(min(sums, key=sums.get))
print(sums, file=sys.stderr)
PY
)
echo "=== chosen scatter blocks/SM: $best" >> $L/summary.txt
bench w4-full VYRE_CUDA_PEER_SCATTER_BLOCKS_PER_SM=$best VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=5
s=$SECONDS
VYRE_CUDA_PEER_SCATTER_BLOCKS_PER_SM=$best VYRE_CUDA_REQUIRE_GPUS=4 timeout 200 $B/bin/gpu_cluster --nocapture --test-threads=1 > $L/gpu_cluster_w4.log 2>&1
echo "=== gpu_cluster W=4 scatter blocks/SM=$best rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|W = 4:|fold cases" $L/gpu_cluster_w4.log | head -10 >> $L/summary.txt
pack
grep -E "^===|MET|MISSED|min ratio" $L/summary.txt
