#!/usr/bin/env bash
# Call 4 (nvidia-h200-x4): the fewest passes per thread of the 3+-rank peer folds
# (VYRE_CUDA_PEER_FOLD_PASSES: 1 = the grid as large as 1 block per SM allows), A/B on
# 4 GPUs for AllReduce and ReduceScatter (512 KiB .. 32 MiB, 3 rounds, mirrored order).
# The value with the smallest summed exact time then runs the whole benchmark (5 rounds)
# and the 4-GPU cluster suite; then, with the committed defaults, the 2-GPU cluster suite
# and the whole 2-GPU benchmark.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/x4run4; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .x4run/bin.tar.xz $B
L=/tmp/x4logs4; rm -rf $L; mkdir -p $L
pack() { tar -C /tmp -czf $OUT/logs.tgz x4logs4; cp $L/summary.txt $OUT/summary.txt 2>/dev/null; }
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "NCCL_* environment:"; env | grep '^NCCL_' | sort; } > $L/topology.txt 2>&1
export VYRE_CUDA_REQUIRE_GPU=1
bench() { # name, then env assignments
  local name=$1; shift; local s=$SECONDS
  env "$@" VYRE_BENCH_OUT=$L/$name.jsonl timeout 200 $B/bin/bench_collectives > $L/$name.log 2>&1
  echo "=== $name rc=$? $((SECONDS-s)) s ($*)" >> $L/summary.txt
  grep -E "^(all_reduce|all_gather|reduce_scatter|broadcast) |: (MET|MISSED)|min ratio" $L/$name.log >> $L/summary.txt
  pack
}
for p in 1 2 4 8 8 4 2 1; do
  bench w4-passes-$p-$SECONDS VYRE_CUDA_PEER_FOLD_PASSES=$p VYRE_BENCH_OPS=all_reduce,reduce_scatter \
    VYRE_BENCH_MIN_BYTES=524288 VYRE_BENCH_MAX_BYTES=33554432 VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=3
done
best=$(python3 - "$L" <<'PY'
import glob, json, sys
sums = {}
for path in glob.glob(sys.argv[1] + "/w4-passes-*.jsonl"):
    p = path.split("/")[-1].split("-")[2]
    for line in open(path):
        row = json.loads(line)
        if row.get("type") == "row" and row["us"].get("exact"):
            sums[p] = sums.get(p, 0.0) + row["us"]["exact"]
print(min(sums, key=sums.get))
print(sums, file=sys.stderr)
PY
)
echo "=== chosen passes: $best" >> $L/summary.txt
bench w4-full VYRE_CUDA_PEER_FOLD_PASSES=$best VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=5
s=$SECONDS
VYRE_CUDA_PEER_FOLD_PASSES=$best VYRE_CUDA_REQUIRE_GPUS=4 timeout 200 $B/bin/gpu_cluster --nocapture --test-threads=1 > $L/gpu_cluster_w4.log 2>&1
echo "=== gpu_cluster W=4 passes=$best rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|W = 4:|fold cases" $L/gpu_cluster_w4.log | head -10 >> $L/summary.txt
pack
s=$SECONDS
CUDA_VISIBLE_DEVICES=0,1 VYRE_CUDA_REQUIRE_GPUS=2 timeout 150 $B/bin/gpu_cluster --nocapture --test-threads=1 > $L/gpu_cluster_w2.log 2>&1
echo "=== gpu_cluster W=2 rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|W = 2:|fold cases" $L/gpu_cluster_w2.log | head -10 >> $L/summary.txt
pack
bench w2-full CUDA_VISIBLE_DEVICES=0,1 VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=5
grep -E "^===|MET|MISSED|min ratio" $L/summary.txt
