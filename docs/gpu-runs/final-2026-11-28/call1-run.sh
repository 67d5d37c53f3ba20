#!/usr/bin/env bash
# Call 1 (nvidia-h200-x2), tree f83a835: issue 20's last run on the reviewed code (topology,
# the collective benchmark at W = 2, the cluster suite at W = 2), the single-GPU suites
# split over the two GPUs, and issue 17's complete-shape fuzz (seed 0x17c0de2035, 16
# processes x 2 workers, 8 per GPU) for the rest of the call.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/frun1; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .x4run/bin.tar.xz $B
L=/tmp/flogs1; rm -rf $L; mkdir -p $L/fuzz $L/saved
pack() { tar -C /tmp -czf $OUT/logs.tgz flogs1; cp $L/summary.txt $OUT/summary.txt 2>/dev/null; }
{ date -u; nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=name,driver_version --format=csv;
  echo "NCCL: $(ls /usr/lib/x86_64-linux-gnu/libnccl.so* /usr/local/lib/libnccl.so* 2>/dev/null | tr '\n' ' ')";
  echo "NCCL_* environment:"; env | grep '^NCCL_' | sort; } > $L/topology.txt 2>&1
export VYRE_CUDA_REQUIRE_GPU=1
s=$SECONDS
VYRE_BENCH_OUT=$L/w2-full.jsonl VYRE_BENCH_ITERS=100 VYRE_BENCH_ROUNDS=5 timeout 120 $B/bin/bench_collectives > $L/w2-full.log 2>&1
echo "=== bench_collectives W=2 rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "^(all_reduce|all_gather|reduce_scatter|broadcast) |: (MET|MISSED)|min ratio|FAIL|NCCL" $L/w2-full.log >> $L/summary.txt
pack
s=$SECONDS
VYRE_CUDA_REQUIRE_GPUS=2 timeout 150 $B/bin/gpu_cluster --nocapture --test-threads=1 > $L/gpu_cluster_w2.log 2>&1
echo "=== gpu_cluster W=2 rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|W = 2:|fold cases|aborted after|folded AllReduce" $L/gpu_cluster_w2.log | head -12 >> $L/summary.txt
s=$SECONDS
for t in gpu_collectives gpu_nccl; do
  VYRE_CUDA_REQUIRE_GPUS=2 timeout 60 $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t rc=$? (both GPUs)" >> $L/summary.txt; grep -E "test result|panicked|FAILED" $L/$t.log | head -4 >> $L/summary.txt
done
pack
FUZZT=$((560 - SECONDS)); echo "=== fuzz deadline ${FUZZT} s from t=${SECONDS}" >> $L/summary.txt
pids=()
for k in $(seq 0 15); do
  CUDA_VISIBLE_DEVICES=$((k % 2)) VYRE_CUDA_FUZZ_SHARD="$k/16" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=${SEED:-0x17c0de2035} VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-35)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 \
    timeout $FUZZT $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
suites() { # GPU, then suites
  local g=$1; shift
  for t in "$@"; do
    local s=$SECONDS
    CUDA_VISIBLE_DEVICES=$g timeout 200 $B/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
    echo "=== $t rc=$? $((SECONDS-s)) s (GPU $g)" > $L/$t.sum
    grep -E "test result|panicked|FAILED|mismatch|cases run|replayed|identical" $L/$t.log | head -12 >> $L/$t.sum
  done
}
suites 0 gpu_semantics gpu_elementwise gpu_pipeline driver_smoke gpu_async gpu_resident gpu_grid_sync gpu_artifact_chain &
sa=$!
suites 1 gpu_primitives fuzz_regressions gpu_half gpu_optimizer gpu_pool_release gpu_artifact gpu_jit_helper gpu_libm_sweep gpu_stress &
sb=$!
wait $sa $sb; cat $L/*.sum >> $L/summary.txt; pack
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $L/summary.txt; done
grep -h "^fuzz: " $L/fuzz/shard_*.log | grep -v "last backend metrics\|worker time" >> $L/summary.txt
pack
grep -E "^===|MET|MISSED|test result|programs run|shard" $L/summary.txt | head -120
