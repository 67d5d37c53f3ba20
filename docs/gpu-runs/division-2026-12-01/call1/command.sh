set -uo pipefail
C=/tmp/vsweep; rm -rf $C; mkdir -p $C $OUT/sweep
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrun/bin.tar.xz $C
s=$SECONDS
VYRE_CUDA_REQUIRE_GPU=1 timeout 200 $C/bin/gpu_libm_sweep --nocapture --test-threads=1 > $OUT/sweep/libm_sweep.log 2>&1
echo "=== gpu_libm_sweep rc=$? $((SECONDS-s)) s"; grep -E "libm sweep|division|test result|panicked" $OUT/sweep/libm_sweep.log
OUT=$OUT BUNDLE=.smrun SEED=0x17c0de20d0 LIMIT=$((570 - SECONDS)) NF=12 bash scripts/device-suites.sh
