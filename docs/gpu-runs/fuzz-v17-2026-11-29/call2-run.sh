#!/usr/bin/env bash
# Call 2: which program of shard 11/16 (seed 0x17c0de2038) raised CUDA_ERROR_ILLEGAL_ADDRESS
# in call 1? The two saved programs alone (probe: 50 sequential, 4x50 threaded, fresh
# backends); the shard's first 1240 programs replayed natively (3 runs with 2 workers as in
# call 1, 1 run with 1 worker); the same programs under compute-sanitizer memcheck, one
# worker, split over 4 processes (shards 11, 27, 43, 59 of 64 = shard 11 of 16).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/fv17d; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun7/bin.tar.xz $B
L=/tmp/fv17dlogs; rm -rf $L; mkdir -p $L/saved
export VYRE_CUDA_REQUIRE_GPU=1
T=${LIMIT:-300}
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "sanitizer: $CS" >> $L/summary.txt
fz() { # name shard threads [prefix...]
  local name=$1 shard=$2 threads=$3; shift 3
  VYRE_CUDA_FUZZ_SHARD=$shard VYRE_CUDA_FUZZ_THREADS=$threads VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=19840 VYRE_CUDA_FUZZ_SEED=0x17c0de2038 VYRE_CUDA_FUZZ_SECONDS=$((T-40)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved/$name VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=15 \
    timeout $((T-10)) "$@" $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/$name.log 2>&1
  echo "=== $name rc=$?" >> $L/summary.txt
}
pids=()
for r in 1 2 3; do fz native2-$r 11/16 2 & pids+=($!); done
fz native1 11/16 1 & pids+=($!)
for s in 11 27 43 59; do
  fz memcheck-$s $s/64 1 $CS --tool memcheck --print-limit 20 --log-file $L/memcheck-$s.sanitizer.txt & pids+=($!)
done
PROBE_REPS=50 PROBE_CASES=$(ls $PWD/.smrun7/cases/*.case | paste -sd,) timeout 120 \
  $B/bin/zz_scratch --exact probe --nocapture > $L/probe.log 2>&1
echo "=== probe rc=$?" >> $L/summary.txt
for p in "${pids[@]}"; do wait $p; done
for f in $L/*.log; do echo "--- $(basename $f)"; grep -E "FAIL|programs run|HANG|panicked" $f | head -6; done >> $L/summary.txt
for f in $L/memcheck-*.sanitizer.txt; do echo "--- $(basename $f)"; grep -E "ERROR SUMMARY|Invalid|vyre_|at 0x|Address" $f | head -20; done >> $L/summary.txt
grep "^probe" $L/probe.log >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv17dlogs; cp $L/summary.txt $OUT/summary.txt
cat $L/summary.txt | cut -c1-300 | head -100
