#!/usr/bin/env bash
# Runs on the device: GPU tests, a short fuzz, compare rows, pipeline variants.
set -u
B=/tmp/map; mkdir -p $B && tar -C $B -xzf .devrun-map/bin.tar.gz
cd $B/bin
export VYRE_CUDA_REQUIRE_GPU=1
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1; nproc >> $S
for t in gpu_elementwise gpu_semantics gpu_resident gpu_primitives; do
  start=$(date +%s)
  echo "===== $t" >> $OUT/tests.log
  timeout 120 ./$t --nocapture --test-threads=1 >> $OUT/tests.log 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - start ))s $(grep 'test result' $OUT/tests.log | tail -1)" >> $S
done
start=$(date +%s)
VYRE_CUDA_FUZZ_SECONDS=40 timeout 100 ./gpu_fuzz --nocapture --test-threads=1 > $OUT/gpu_fuzz.log 2>&1; rc=$?
echo "gpu_fuzz rc=$rc $(( $(date +%s) - start ))s $(grep 'test result' $OUT/gpu_fuzz.log | tail -1)" >> $S
cd $B
start=$(date +%s)
VYRE_AUTOTUNER=off timeout 90 ./bin/vyre-compare-after --only 'resident_vadd_2^26,vadd_u32_2^26,saxpy_f32_2^24' --json $OUT/compare-after.json > $OUT/compare-after.log 2>&1; rc=$?
echo "compare-after rc=$rc $(( $(date +%s) - start ))s" >> $S
for v in "VYRE_CUDA_PIPELINE_THREADS=8" "VYRE_CUDA_PIPELINE_CHUNK_BYTES=4194304" "VYRE_CUDA_PIPELINE_CHUNK_BYTES=1048576"; do
  start=$(date +%s)
  echo "===== $v" >> $OUT/variants.log
  env $v VYRE_AUTOTUNER=off timeout 35 ./bin/vyre-compare-after --only 'vadd_u32_2^26' --json /tmp/v.json >> $OUT/variants.log 2>&1; rc=$?
  echo "variant $v rc=$rc $(( $(date +%s) - start ))s" >> $S
done
cat $S
grep -h "^resident_vadd\|^vadd_u32\|^saxpy\|=====" $OUT/compare-after.log $OUT/variants.log
