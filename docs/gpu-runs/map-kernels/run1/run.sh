#!/usr/bin/env bash
# Runs on the device: GPU tests, a short fuzz, compare rows after/before.
set -u
B=/tmp/map; mkdir -p $B && tar -C $B -xzf .devrun-map/bin.tar.gz
cd $B/bin
export VYRE_CUDA_REQUIRE_GPU=1
S=$OUT/summary.txt
for t in gpu_elementwise gpu_semantics gpu_resident gpu_primitives; do
  start=$(date +%s)
  timeout 120 ./$t --nocapture --test-threads=1 > $OUT/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - start ))s $(grep 'test result' $OUT/$t.log | tail -1)" >> $S
done
start=$(date +%s)
VYRE_CUDA_FUZZ_SECONDS=${FUZZ:-45} timeout 120 ./gpu_fuzz --nocapture --test-threads=1 > $OUT/gpu_fuzz.log 2>&1; rc=$?
echo "gpu_fuzz rc=$rc $(( $(date +%s) - start ))s $(grep 'test result' $OUT/gpu_fuzz.log | tail -1)" >> $S
cd $B
for v in after before; do
  start=$(date +%s)
  VYRE_AUTOTUNER=off timeout ${CMP_T:-100} ./bin/vyre-compare-$v --only resident_vadd_2^26,vadd_u32_2^26,saxpy_f32_2^24 --json $OUT/compare-$v.json > $OUT/compare-$v.log 2>&1; rc=$?
  echo "compare-$v rc=$rc $(( $(date +%s) - start ))s" >> $S
done
cat $S
grep -h "resident_vadd\|vadd_u32\|saxpy" $OUT/compare-*.log | head -20
