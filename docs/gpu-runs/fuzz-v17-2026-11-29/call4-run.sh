#!/usr/bin/env bash
# Call 4: which earlier programs make seed 0xc9c648eaeac04c4f read out of bounds under
# memcheck? Shard 59/64 of seed 0x17c0de2038 ran 306 programs before it (call 2); here the
# last K of them and it (K+1 programs, one worker) under memcheck, for several K in
# parallel; and all 307 with the packed path off (VYRE_CUDA_SMALL_DISPATCH_BYTES=0).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/fv17f; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun7/bin.tar.xz $B
L=/tmp/fv17flogs; rm -rf $L; mkdir -p $L
export VYRE_CUDA_REQUIRE_GPU=1
CS=/usr/local/cuda/bin/compute-sanitizer
ALL=$(cat .smrun7/cases/seeds-59-64.txt)
N=$(echo $ALL | tr ',' '\n' | wc -l)
run() { # name K [env...]
  local name=$1 k=$2; shift 2
  local seeds=$(echo $ALL | tr ',' '\n' | tail -n $((k+1)) | paste -sd,)
  env "$@" VYRE_CUDA_FUZZ_SEEDS=$seeds VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_THREADS=1 \
    VYRE_CUDA_FUZZ_SHAPE=complete VYRE_CUDA_FUZZ_SHRINK=0 timeout 200 \
    $CS --tool memcheck --print-limit 10 --log-file $L/$name.san.txt \
    $B/bin/gpu_fuzz --nocapture --test-threads=1 > $L/$name.log 2>&1
  echo "=== $name rc=$? $(grep -c 'Invalid' $L/$name.san.txt) invalid; $(grep -h 'programs run' $L/$name.log)" >> $L/summary.txt
}
pids=()
for k in 0 1 2 4 8 16 32 64 128 $((N-1)); do run k$k $k & pids+=($!); done
run nosmall $((N-1)) VYRE_CUDA_SMALL_DISPATCH_BYTES=0 & pids+=($!)
for p in "${pids[@]}"; do wait $p; done
for f in $L/*.san.txt; do echo "--- $(basename $f)"; grep -E "Invalid|by thread|Access to|bytes after|bytes before|at vyre" $f | head -10; done >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv17flogs; cp $L/summary.txt $OUT/summary.txt; cat $L/summary.txt | cut -c1-300
