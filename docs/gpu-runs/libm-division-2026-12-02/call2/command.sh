set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT0=$OUT; mkdir -p $OUT/b
OUT=$OUT0/b BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v50,ptx/incumbent,ptx/v49,ptx/v48 > $OUT0/b/bench.log 2>&1
echo "=== bench done at $SECONDS s"; sed -n '/fixed cost/,/^| vyre-libs::graph::ast_walk_preorder/p' $OUT0/b/jit_time.txt | head -18
mkdir -p /tmp/hx && tar -C /tmp/hx -xJf .smrunX/h.tar.xz
for h in v49 v50 v49; do
  timeout 100 /tmp/hx/vyre-compare-$h --only libs --deadline-s 90 --json $OUT0/b/libs-$h-$SECONDS.json > $OUT0/b/libs-$h-$SECONDS.txt 2>&1; echo "libs $h rc=$? at $SECONDS s"
done
for f in $OUT0/b/libs.txt $OUT0/b/libs-v*.txt; do echo "--- $f"; grep -E "_kernel " $f | grep -v "^|" | grep -E "gelu|swiglu|rms_norm|layer_norm|softmax|flash|matmul_kernel" | sed -E 's/ *kernel time \(device events\), resident buffers, [^|]*\|//; s/floor: [^|]*\| //' | cut -c1-90; done
tar -C $OUT0 -czf $OUT0/bench.tgz b && rm -rf $OUT0/b
C=/tmp/vs; mkdir -p $C && python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrunT2/bin.tar.xz $C
VYRE_CUDA_REQUIRE_GPU=1 timeout 150 $C/bin/gpu_libm_sweep --nocapture --test-threads=1 > $OUT0/libm_sweep.log 2>&1; echo "libm sweep rc=$? at $SECONDS s"; grep -E "differing|test result|panicked|pairs" $OUT0/libm_sweep.log | head -30
VYRE_CUDA_REQUIRE_GPU=1 VYRE_LIBM_SWEEP_EXHAUSTIVE=1 VYRE_LIBM_SWEEP_ONLY=reciprocal,inverse_sqrt,asinf,acosf,atanf,sinhf,coshf,tanhf,expf,logf,log2f timeout $((400 - SECONDS)) $C/bin/gpu_libm_sweep --nocapture --test-threads=1 every_input > $OUT0/exhaustive.log 2>&1; echo "exhaustive rc=$? at $SECONDS s"
grep -E "libm sweep|test result" $OUT0/exhaustive.log
OUT=$OUT0 BUNDLE=.smrunT2 SEED=0x17c0de20f5 LIMIT=$((585 - SECONDS)) NF=12 bash scripts/device-suites.sh gpu_semantics calls fuzz_regressions gpu_primitives gpu_pipeline driver_smoke gpu_elementwise
echo "all done at $SECONDS s"
