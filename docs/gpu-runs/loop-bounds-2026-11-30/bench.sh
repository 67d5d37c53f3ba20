#!/usr/bin/env bash
# Thirteenth session (2026-11-30): emitter v26 (loop loads' bounds checks hoisted before the
# loop) measured on an otherwise idle GPU, vyre-compare of HEAD in .smrunB/bundle.tar.xz
# with three PTX directories from `vyre-compare --dump-ptx`:
#   ptx/v26 (HEAD), ptx/v24 (the corpus before: v24 and v25 emit every corpus module alike),
#   ptx/incumbent (vyre-driver-cuda 0.7.2)
#  1. the driver's JIT of the fixture corpus, module by module, interleaved, one process;
#  2. the vyre-libs workloads (kernel time on resident buffers and end to end).
# Usage on the device: OUT=$OUT bash docs/gpu-runs/loop-bounds-2026-11-30/bench.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
T=/tmp/vb; rm -rf $T; mkdir -p $T/home
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrunB/bundle.tar.xz $T
cd $T
( export CUDA_CACHE_DISABLE=1 HOME=$T/home
  timeout 150 ./vyre-compare --jit-time ptx/v26,ptx/incumbent,ptx/v24 --reps 3 \
    --ptxas-out $OUT/jit_time.tsv > $OUT/jit_time.txt 2>&1; echo "jit-time rc=$?" )
timeout 200 ./vyre-compare --only libs --deadline-s 180 --json $OUT/libs.json --markdown $OUT/libs.md > $OUT/libs.txt 2>&1; echo "libs rc=$?"
sed -n '/fixed cost/,/^wrote/p' $OUT/jit_time.txt | head -30
grep -E "libs_" $OUT/libs.txt | head -40
