#!/usr/bin/env bash
# Replay each saved hang case alone on the GPU with a timeout (rc 124: it hung), with the
# fuzz_regressions binary of a bundle built by ../mkbundle.sh. To attribute a hang to a
# change, run it with two bundles (HEAD, and a build without the change) one after another.
# Usage on the device: OUT=$OUT BUNDLE=.smrun19 bash docs/gpu-runs/views-2026-11-29/hang/replay.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.."
HERE=docs/gpu-runs/views-2026-11-29/hang
C=/tmp/hang-replay-bin; rm -rf $C; mkdir -p $C
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" ${BUNDLE:-.smrun19}/bin.tar.xz $C
export VYRE_CUDA_REQUIRE_GPU=1
for case in $HERE/*.case; do
  d=$(mktemp -d); cp "$case" "$d/"
  s=$SECONDS
  VYRE_CUDA_FUZZ_REGRESSION_DIR=$d timeout ${TIMEOUT:-60} $C/bin/fuzz_regressions \
    saved_cases_match_the_reference_on_the_gpu --nocapture --test-threads=1 > $OUT/$(basename "$case" .case).log 2>&1
  echo "$(basename "$case"): rc=$? $((SECONDS-s)) s" | tee -a $OUT/replay.txt
done
