#!/usr/bin/env bash
# On the device (GPU idle): the driver JIT of the corpus under three loop-unroll policies
# (v37 as emitted; `.pragma "nounroll"` on every loop; on loops of a constant trip <= 16)
# and the vyre-libs workloads' kernel times with the same policies (VYRE_CUDA_NOUNROLL,
# an experiment build of 3093ec3).
set -uo pipefail
cd "$(dirname "$0")"
( export CUDA_CACHE_DISABLE=1 HOME=$PWD/home0; mkdir -p $HOME
  timeout 200 ./vyre-compare --jit-time ptx/v37,ptx/incumbent,ptx/all,ptx/le16 --reps 3 --ptxas-out $OUT/jit_time.tsv > $OUT/jit_time.txt 2>&1; echo "jit-time rc=$?" )
for pol in none all le:16; do
  ( [ $pol = none ] || export VYRE_CUDA_NOUNROLL=$pol; export HOME=$PWD/home-${pol/:/}; mkdir -p $HOME
    timeout 100 ./vyre-compare --only libs --deadline-s 90 --json $OUT/libs-${pol/:/}.json > $OUT/libs-${pol/:/}.txt 2>&1; echo "libs $pol rc=$?" )
done
sed -n '/fixed cost/,/^$/p' $OUT/jit_time.txt | head -12
for pol in none all le16; do echo "== $pol"; grep -E "_kernel " $OUT/libs-$pol.txt | sed 's/ *kernel time.*| vyre-cuda: / /' ; done
