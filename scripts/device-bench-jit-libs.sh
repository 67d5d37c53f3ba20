#!/usr/bin/env bash
# On the GPU machine (otherwise idle), from a bundle made here by
# scripts/device-bundle-bench.sh (carry its folder):
#  1. the driver's JIT of the fixture corpus for each PTX directory named, module by module,
#     interleaved, one process, JIT cache disabled, empty HOME (`--jit-time`, median of 3);
#  2. the vyre-libs workloads (kernel time on resident buffers and end to end).
#   OUT=$OUT BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v26,ptx/incumbent,ptx/v24
# Writes jit_time.{tsv,txt} and libs.{json,md,txt} into $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
DIRS=${1:?comma-separated PTX directories of the bundle, e.g. ptx/v26,ptx/incumbent}
T=/tmp/vb; rm -rf $T; mkdir -p $T/home
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" ${BUNDLE:-.smrunB}/bundle.tar.xz $T
cd $T
( export CUDA_CACHE_DISABLE=1 HOME=$T/home
  timeout 150 ./vyre-compare --jit-time $DIRS --reps 3 \
    --ptxas-out $OUT/jit_time.tsv > $OUT/jit_time.txt 2>&1; echo "jit-time rc=$?" )
timeout 200 ./vyre-compare --only libs --deadline-s 180 --json $OUT/libs.json --markdown $OUT/libs.md > $OUT/libs.txt 2>&1; echo "libs rc=$?"
sed -n '/fixed cost/,/^wrote/p' $OUT/jit_time.txt | head -30
grep -E "libs_" $OUT/libs.txt | head -40
