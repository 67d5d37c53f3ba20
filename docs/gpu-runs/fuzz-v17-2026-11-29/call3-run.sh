#!/usr/bin/env bash
# Call 3: seed 0xc9c648eaeac04c4f (memcheck in call 2: an out-of-bounds 4-byte global read in
# vyre_main+0x2f00) alone: native dispatches with the driver's JIT cache in a fresh folder (to
# read back the SASS the JIT made), then under compute-sanitizer memcheck alone.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/fv17e; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun7/bin.tar.xz $B
L=/tmp/fv17elogs; rm -rf $L; mkdir -p $L/jc $L/ptx
export VYRE_CUDA_REQUIRE_GPU=1
CASE=$PWD/.smrun7/cases/gpu-gpu-error-c9c648eaeac04c4f.case
CUDA_CACHE_PATH=$L/jc CUDA_CACHE_DISABLE=0 PROBE_REPS=20 PROBE_PTX_DIR=$L/ptx PROBE_CASES=$CASE \
  timeout 60 $B/bin/zz_scratch --exact probe --nocapture > $L/probe-native.log 2>&1; echo "native rc=$?" >> $L/summary.txt
CS=/usr/local/cuda/bin/compute-sanitizer
PROBE_REPS=2 PROBE_CASES=$CASE timeout 200 $CS --tool memcheck --print-limit 30 \
  $B/bin/zz_scratch --exact probe --nocapture > $L/probe-memcheck.log 2>&1; echo "memcheck rc=$?" >> $L/summary.txt
/usr/local/cuda/bin/ptxas --version >> $L/summary.txt 2>&1
python3 - $L/jc $L <<'PY'
import os, sys
n = 0
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        data = open(os.path.join(root, f), 'rb').read()
        i = data.find(b'\x7fELF')
        while i >= 0:
            open(f"{sys.argv[2]}/jit{n}.cubin", 'wb').write(data[i:]); n += 1
            i = data.find(b'\x7fELF', i + 4)
print("cubins", n)
PY
for c in $L/jit*.cubin; do /usr/local/cuda/bin/nvdisasm -c $c > $c.sass 2>&1 || /usr/local/cuda/bin/cuobjdump -sass $c > $c.sass 2>&1; done
grep -E "^probe|rc=" $L/probe-native.log >> $L/summary.txt
grep -E "^probe|Invalid|at vyre|thread|Access|bytes after|ERROR SUMMARY" $L/probe-memcheck.log | head -40 >> $L/summary.txt
ls -la $L $L/jc >> $L/summary.txt
tar -C /tmp -czf $OUT/logs.tgz fv17elogs; cp $L/summary.txt $OUT/summary.txt; cat $L/summary.txt | cut -c1-300
