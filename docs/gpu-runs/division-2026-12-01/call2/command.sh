set -uo pipefail
mkdir -p $OUT/b $OUT/L
OUT=$OUT/b BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v42,ptx/incumbent,ptx/v41 > $OUT/b/bench.log 2>&1
echo "=== bench done at $SECONDS s"; tail -45 $OUT/b/bench.log
T=/tmp/vb; for f in gpu_libm_sweep vc41; do python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" .smrunL/$f.xz $T/$f; chmod +x $T/$f; done
cd $T && timeout 100 ./vc41 --only libs --deadline-s 90 --markdown $OUT/L/v41.md > $OUT/L/v41.txt 2>&1; echo "v41 libs rc=$? at $SECONDS s"; grep -E "libs_" $OUT/L/v41.txt | head -20
timeout 100 ./vyre-compare --only libs --deadline-s 90 --markdown $OUT/L/v42b.md > $OUT/L/v42b.txt 2>&1; echo "v42 libs (2) rc=$? at $SECONDS s"; grep -E "libs_" $OUT/L/v42b.txt | head -20
VYRE_CUDA_REQUIRE_GPU=1 VYRE_LIBM_SWEEP_EXHAUSTIVE=1 timeout $((560 - SECONDS)) ./gpu_libm_sweep --exact libm_ports_match_the_reference_on_every_input --nocapture > $OUT/L/exhaustive.log 2>&1; echo "exhaustive rc=$? at $SECONDS s"; grep "libm sweep" $OUT/L/exhaustive.log
cd $OUT && tar czf L.tgz L && rm -rf L
