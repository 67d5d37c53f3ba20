#!/usr/bin/env bash
cd "$(dirname "$0")"
export VYRE_CUDA_REQUIRE_GPU=1
CUDA_CACHE_DISABLE=1 timeout 200 python3 k/harness.py 2>&1 | tee $OUT/harness.txt
