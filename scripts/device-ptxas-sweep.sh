#!/usr/bin/env bash
# The long ptxas sweep of the fuzz gate on the GPU machine's CPUs (no GPU is used): runs the
# bundled `fuzz_codegen` test binary (scripts/device-bundle.sh --ptxas) on PROGRAMS random programs
# of the large shape (or the default one), assembling every module for sm_80 and sm_90 with
# the bundled CUDA 13.0.88 ptxas and (unless the 4th argument is `cuda13`) the 12.9.86 one,
# one worker thread per CPU. Failures are shrunk into $OUT/found/. Summary lines go to
# stdout and $OUT/sweep_<shape>_<seed>.log.
#   bash scripts/device-ptxas-sweep.sh [programs] [base-seed] [large|default] [both|cuda13]
set -uo pipefail
cd "$(dirname "$0")/.."
programs="${1:-10000}"; seed="${2:-0x5eedc0de2024}"; shape="${3:-large}"; compilers="${4:-both}"
. scripts/devrun-unpack.sh
out="${OUT:-device-logs}"; mkdir -p "$out/found"
export VYRE_CUDA_PTXAS="$bin_dir/bin/ptxas-cuda-nvcc"
if [ "$compilers" = cuda13 ]; then
  unset VYRE_CUDA_PTXAS_CU12 VYRE_CUDA_REQUIRE_PTXAS
else
  export VYRE_CUDA_PTXAS_CU12="$bin_dir/bin/ptxas-cuda-nvcc-cu12" VYRE_CUDA_REQUIRE_PTXAS=1
fi
export VYRE_CUDA_FUZZ_SAVE_DIR="$out/found" VYRE_CUDA_FUZZ_SEED="$seed"
case "$shape" in
  large) export VYRE_CUDA_FUZZ_CI_LARGE_PROGRAMS="$programs"
         test=fuzz_codegen_large_programs_emit_assemble_and_never_panic ;;
  *) export VYRE_CUDA_FUZZ_CI_PROGRAMS="$programs"; test=fuzz_codegen_emits_assembles_and_never_panics ;;
esac
log="$out/sweep_${shape}_${seed}.log"
"$bin_dir/bin/fuzz_codegen" --exact "$test" --nocapture > "$log" 2>&1
rc=$?
grep -E "fuzz-codegen|reference:|emitted:|ptxas|wall time|FAIL|saved|test result" "$log" | head -40
echo "rc=$rc"
exit $rc
