set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT0=$OUT; mkdir -p $OUT/b
OUT=$OUT0/b BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v47,ptx/incumbent,ptx/v46 > $OUT0/b/bench.log 2>&1
echo "=== bench done at $SECONDS s"; sed -n '/fixed cost/,/^| vyre-libs::graph::ast_walk_preorder/p' $OUT0/b/jit_time.txt | head -16
grep -E "line_index|prefix" $OUT0/b/jit_time.txt | head -4
grep -E "_kernel " $OUT0/b/libs.txt | grep -v "^|" | sed -E 's/ *kernel time \(device events\), resident buffers, [^|]*\|//; s/floor: [^|]*\| //' | cut -c1-100
T=/tmp/vb; cd $T; mkdir -p $T/h1 $T/h2
for r in 1 2; do
CUDA_CACHE_DISABLE=1 VYRE_AUTOTUNER=off HOME=$T/h$r timeout 60 ./vyre-compare --only corpus --deadline-s 50 --json $OUT0/b/corpus$r.json --markdown $OUT0/b/corpus$r.md > $OUT0/b/corpus$r.txt 2>&1; echo "corpus $r rc=$? at $SECONDS s"
grep -E "line_index|^corpus_first  " $OUT0/b/corpus$r.txt | cut -c1-200
done
cd - > /dev/null
tar -C $OUT0 -czf $OUT0/bench.tgz b && rm -rf $OUT0/b
OUT=$OUT0 BUNDLE=.smrunT SEED=0x17c0de20f2 LIMIT=$((565 - SECONDS)) NF=12 bash scripts/device-suites.sh gpu_grid_sync gpu_semantics calls fuzz_regressions gpu_primitives gpu_literal_extents gpu_elementwise gpu_pipeline gpu_artifact gpu_artifact_chain gpu_async gpu_half driver_smoke gpu_resident gpu_stress
echo "all done at $SECONDS s"
