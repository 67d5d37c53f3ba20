#!/usr/bin/env bash
# What call 2 ran (thirteenth session), with the generic scripts of this commit's tree:
# here `bash scripts/device-bundle-bench.sh .smrunB v26 v24=.scratch/dump24` (v24: the
# eleventh session's dump; v24 and v25 emit every corpus module alike), then on the device
#   OUT=$OUT bash docs/gpu-runs/loop-bounds-2026-11-30/bench.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v26,ptx/incumbent,ptx/v24
