#!/usr/bin/env bash
# Eleventh session (2026-11-29): emitter v24 (.aligned workgroup barriers) measured, the GPU
# otherwise idle, vyre-compare of HEAD in
# .smrunB/bundle.tar.xz with three PTX directories from `vyre-compare --dump-ptx`:
#   ptx/v24 (HEAD), ptx/v23 (the emitter before it), ptx/incumbent (vyre-driver-cuda 0.7.2)
#  1. the driver's JIT of the fixture corpus, module by module, interleaved, one process;
#  2. the vyre-libs workloads (kernel time on resident buffers and end to end);
#  3. the dispatch rows (regression check).
# Usage on the device: OUT=$OUT bash docs/gpu-runs/barrier-2026-11-29/bench.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
T=/tmp/vb; rm -rf $T; mkdir -p $T/home
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrunB/bundle.tar.xz $T
cd $T
( export CUDA_CACHE_DISABLE=1 HOME=$T/home
  timeout 200 ./vyre-compare --jit-time ptx/v24,ptx/incumbent,ptx/v23 --reps 3 \
    --ptxas-out $OUT/jit_time.tsv > $OUT/jit_time.txt 2>&1; echo "jit-time rc=$?" )
timeout 200 ./vyre-compare --only libs --deadline-s 180 --json $OUT/libs.json --markdown $OUT/libs.md > $OUT/libs.txt 2>&1; echo "libs rc=$?"
timeout 130 ./vyre-compare --only tiny,warm,vadd,saxpy,resident --deadline-s 110 --json $OUT/dispatch.json --markdown $OUT/dispatch.md > $OUT/dispatch.txt 2>&1; echo "dispatch rc=$?"
sed -n '/fixed cost/,/^wrote/p' $OUT/jit_time.txt | head -30
grep -E "libs_|tiny|warm|vadd|saxpy|resident" $OUT/libs.txt $OUT/dispatch.txt | head -60
