#!/usr/bin/env bash
# Call 6 (nvidia-h200-x4): the peer-synced folds' waits without a device-side deadline (an
# aborted dispatch's host releases them) and their modules compiled before the dispatch
# runs: the cluster suite at W = 4, then its abort tests at W = 2.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/x4run6; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .x4run/bin.tar.xz $B
L=/tmp/x4logs6; rm -rf $L; mkdir -p $L
export VYRE_CUDA_REQUIRE_GPU=1
s=$SECONDS
VYRE_CUDA_REQUIRE_GPUS=4 timeout 150 $B/bin/gpu_cluster --nocapture --test-threads=1 > $L/gpu_cluster_w4.log 2>&1
echo "=== gpu_cluster W=4 rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|W = 4:|fold cases|aborted after|folded AllReduce" $L/gpu_cluster_w4.log | head -12 >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz x4logs6; cp $L/summary.txt $OUT/summary.txt
s=$SECONDS
CUDA_VISIBLE_DEVICES=0,1 VYRE_CUDA_REQUIRE_GPUS=2 timeout 40 $B/bin/gpu_cluster --nocapture --test-threads=1 a_ > $L/gpu_cluster_w2_aborts.log 2>&1
echo "=== gpu_cluster W=2 abort tests rc=$? $((SECONDS-s)) s" >> $L/summary.txt
grep -E "test result|panicked|FAILED|aborted after|folded AllReduce" $L/gpu_cluster_w2_aborts.log | head -8 >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz x4logs6; cp $L/summary.txt $OUT/summary.txt
cat $L/summary.txt
