#!/usr/bin/env bash
# Prepared 2026-11-29 (eighth session) for the next device call (nvidia-h200, about 2 min):
# where the driver's JIT spends its time on our PTX, module by module, interleaved with the
# incumbent's, in one process (issue 18, cold compile). Offline ptxas and jit_probe disagree
# on some modules (the atomics: ptxas 1.5x the incumbent, jit_probe 3x; jit_probe timed each
# engine's corpus as one block, so drift lands on one engine), so this times the driver itself:
#   v21            our corpus PTX (emitter v21 = main), as vyre-cuda hands it to the driver
#   incumbent      vyre-driver-cuda 0.7.2's PTX of the same programs
#   v22            branch emitter-v22-const-pool (f32 constants once per kernel, -12% PTX)
#   v21_noreqntid  v21 without `.reqntid` (does the directive cost the driver?)
#   v21_isa80      v21 with `.version 8.0` (all 249 assemble with ptxas 13.0 for sm_90)
# Needs .smrun16/bundle.tar.xz (vyre-compare of 221c7dc + those five directories, built from
# `vyre-compare --dump-ptx` of main and of the branch).
# Usage on the device: OUT=$OUT bash docs/gpu-runs/jit-time-2026-11-29/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
T=/tmp/jt; rm -rf $T; mkdir -p $T/home
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun16/bundle.tar.xz $T
cd $T
export CUDA_CACHE_DISABLE=1 HOME=$T/home
./vyre-compare --jit-time ptx/v21,ptx/incumbent,ptx/v22,ptx/v21_noreqntid,ptx/v21_isa80 --reps 3 \
  --ptxas-out $OUT/jit_time.tsv > $OUT/jit_time.txt 2>&1
echo "rc=$?"
sed -n '/fixed cost/,/^wrote/p' $OUT/jit_time.txt | head -40
