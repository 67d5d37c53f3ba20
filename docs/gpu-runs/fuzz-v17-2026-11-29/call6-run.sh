#!/usr/bin/env bash
# Call 6 (nvidia-h200): what inlining the libm ports (emitter v18) costs, A/B against v17
# (d6c06e0) in one machine session, each run a fresh process: the driver JIT of the fixture
# corpus (CUDA_CACHE_DISABLE=1, empty HOME, `--only jit_probe`) and the vyre-libs workloads
# (`--only libs`: gelu, swiglu, softmax, flash attention... kernel time on resident buffers).
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=/tmp/cmp; rm -rf $B; mkdir -p $B
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun9/bin.tar.xz $B
L=/tmp/cmplogs; rm -rf $L; mkdir -p $L
for v in v17 v18; do
  H=$(mktemp -d); env HOME=$H CUDA_CACHE_DISABLE=1 timeout 90 $B/bin/vyre-compare-$v --only jit_probe \
    --json $L/jit-$v.json --markdown $L/jit-$v.md > $L/jit-$v.log 2>&1; echo "=== jit $v rc=$?" >> $L/summary.txt
done
for v in v18 v17; do
  timeout 90 $B/bin/vyre-compare-$v --only libs --json $L/libs-$v.json --markdown $L/libs-$v.md > $L/libs-$v.log 2>&1
  echo "=== libs $v rc=$?" >> $L/summary.txt
done
for v in v17 v18; do grep -E "corpus.load.(sum|median)|modules_over_2x|took" $L/jit-$v.log | sed "s/^/$v /" >> $L/summary.txt; done
tar -C /tmp -czf $OUT/logs.tgz cmplogs; cp $L/summary.txt $OUT/summary.txt; cat $L/summary.txt
