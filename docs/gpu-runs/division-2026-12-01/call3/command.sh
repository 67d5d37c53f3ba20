set -uo pipefail
mkdir -p $OUT/b $OUT/s
C=/tmp/vsweep; rm -rf $C; mkdir -p $C
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrunT/bin.tar.xz $C
VYRE_CUDA_REQUIRE_GPU=1 timeout 100 $C/bin/gpu_libm_sweep --nocapture --test-threads=1 > $OUT/s/libm_sweep.log 2>&1
echo "=== gpu_libm_sweep rc=$? at $SECONDS s"; grep -E "libm sweep|division|test result|panicked" $OUT/s/libm_sweep.log
VYRE_CUDA_REQUIRE_GPU=1 VYRE_LIBM_SWEEP_EXHAUSTIVE=1 VYRE_LIBM_SWEEP_ONLY=reciprocal,inverse_sqrt timeout 100 $C/bin/gpu_libm_sweep --exact libm_ports_match_the_reference_on_every_input --nocapture > $OUT/s/exhaustive.log 2>&1
echo "=== exhaustive rc=$? at $SECONDS s"; grep -E "libm sweep" $OUT/s/exhaustive.log
OUT=$OUT/b BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v43,ptx/incumbent,ptx/v42 > $OUT/b/bench.log 2>&1
echo "=== bench done at $SECONDS s"; sed -n '/fixed cost/,/^| module/p' $OUT/b/jit_time.txt; grep -E "_kernel " $OUT/b/libs.txt
OUT=$OUT/s BUNDLE=.smrunT SEED=0x17c0de20d1 LIMIT=$((575 - SECONDS)) NF=12 bash scripts/device-suites.sh
cd $OUT && tar czf s.tgz s && rm -rf s
