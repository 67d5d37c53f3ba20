#!/usr/bin/env bash
# Call 4: the benchmarks with the GPU otherwise idle, then the complete-shape count until LIMIT.
set -uo pipefail
cd "$(dirname "$0")"
S=$SECONDS
mkdir -p $OUT/bench $OUT/fuzz
OUT=$OUT/bench bash bench.sh > $OUT/bench/bench.log 2>&1
echo "bench $((SECONDS-S)) s"
OUT=$OUT/fuzz SEED=${SEED:-0x17c0de2061} LIMIT=$((${LIMIT:-520} - (SECONDS-S))) NF=${NF:-12} bash run.sh none
