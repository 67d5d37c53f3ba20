#!/usr/bin/env bash
# On the GPU machine: the GPU suites one after another and, beside them, the complete-shape
# differential fuzz count (NF shards of `gpu_fuzz`, 2 workers each, seed $SEED, until LIMIT
# seconds), from a bundle made here by scripts/device-bundle-gpu.sh (carry its folder).
# Logs go to $OUT/logs.tgz and $OUT/summary.txt (the device tool returns at most 8 files).
#   OUT=$OUT BUNDLE=.smrun SEED=0x17c0de2070 LIMIT=540 NF=12 bash scripts/device-suites.sh \
#     ["gpu_semantics gpu_primitives ..." | none]
# Without suite names it runs the default list; `none` runs only the count (NF=0: no count).
# gpu_resident and gpu_stress (free-memory checks) run before the count starts.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
C=/tmp/vhead; rm -rf $C; mkdir -p $C
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" ${BUNDLE:-.smrun}/bin.tar.xz $C
L=/tmp/vlogs; rm -rf $L; mkdir -p $L/fuzz $L/saved
S=$L/summary.txt
export VYRE_CUDA_REQUIRE_GPU=1
suite() { # name
  local t=$1 s=$SECONDS
  VYRE_CUDA_FUZZ_REGRESSION_DIR=$ROOT/tests/fuzz_regressions timeout 200 $C/bin/$t --nocapture --test-threads=1 > $L/$t.log 2>&1
  echo "=== $t rc=$? $((SECONDS-s)) s" >> $S
  grep -E "test result|panicked|FAILED|mismatch|failed|differing|semantic cases|cases x2|shutdown: free|stress memory|corpus fixtures" $L/$t.log | grep -v "byte-identical$" | head -8 >> $S
}
# The suites: the arguments (words, or one quoted list; `none` runs no suite), else a default.
if [ $# -eq 0 ]; then
  set -- gpu_semantics calls fuzz_regressions gpu_primitives gpu_elementwise gpu_pipeline gpu_artifact \
         gpu_artifact_chain gpu_async gpu_grid_sync gpu_half driver_smoke gpu_resident gpu_stress
fi
# The suites that measure free device memory run first, before the fuzz processes allocate.
ALONE=" gpu_resident gpu_stress "; rest=()
for t in "$@"; do
  for u in $t; do
    case "$ALONE" in *" $u "*) suite "$u" ;; *) [ "$u" = none ] || rest+=("$u") ;; esac
  done
done
FUZZT=$((${LIMIT:-500} - SECONDS)); echo "=== seed ${SEED:=0x17c0de2000}, fuzz deadline ${FUZZT} s" >> $S
NF=${NF:-10}; pids=()
if [ "$NF" -gt 0 ]; then
for k in $(seq 0 $((NF-1))); do
  VYRE_CUDA_FUZZ_SHARD="$k/$NF" VYRE_CUDA_FUZZ_THREADS=2 VYRE_CUDA_FUZZ_SHAPE=complete \
  VYRE_CUDA_FUZZ_PROGRAMS=100000 VYRE_CUDA_FUZZ_SEED=$SEED VYRE_CUDA_FUZZ_SECONDS=$((FUZZT-40)) \
  VYRE_CUDA_FUZZ_SAVE_DIR=$L/saved VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS=20 VYRE_CUDA_FUZZ_HANG_SECONDS=25 \
    timeout $FUZZT $C/bin/gpu_fuzz --nocapture --test-threads=1 > $L/fuzz/shard_$k.log 2>&1 &
  pids+=($!)
done
fi
for u in ${rest[@]+"${rest[@]}"}; do suite "$u"; done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "shard $i rc=$?" >> $S; done
grep -h "^fuzz: " $L/fuzz/shard_*.log 2>/dev/null | grep -v "last backend metrics\|worker time" >> $S
tar -C /tmp -czf $OUT/logs.tgz vlogs; cp $S $OUT/summary.txt
grep -E "^===|FAIL|panicked|shard .* rc=[^0]|programs run|semantic cases|cases x2|shutdown: free|stress memory|mismatch" $S | head -90
