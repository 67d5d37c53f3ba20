set -uo pipefail
mkdir -p $OUT/b $OUT/L
OUT=$OUT/b BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v45,ptx/incumbent,ptx/v45@O0,ptx/v45@O1,ptx/v45@O2,ptx/v45@O3 > $OUT/b/bench.log 2>&1
echo "=== bench done at $SECONDS s"; tail -42 $OUT/b/bench.log | cut -c1-200
T=/tmp/vb; cd $T
for L in 1 0 2 3; do
  VYRE_CUDA_JIT_OPT_LEVEL=$L timeout 100 ./vyre-compare --only libs --deadline-s 90 --markdown $OUT/L/O$L.md > $OUT/L/O$L.txt 2>&1; echo "O$L libs rc=$? at $SECONDS s"
  grep -E "_kernel " $OUT/L/O$L.txt | sed 's/ *kernel time (device events), resident buffers,//' | cut -c1-160
done
cd - >/dev/null
CUDA_CACHE_DISABLE=1 PROBE_DIR=$T/ptx/v45 timeout 150 .smrunB/zz_probe --nocapture > $OUT/L/probe.log 2>&1; echo "probe rc=$? at $SECONDS s"; grep -E "alone|tiered" $OUT/L/probe.log
cd $OUT && tar czf L.tgz L && rm -rf L && tar czf b.tgz b && rm -rf b
