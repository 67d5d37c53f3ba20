set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT0=$OUT; mkdir -p $OUT/b
OUT=$OUT0/b BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v52,ptx/incumbent,ptx/v51,ptx/v50 > $OUT0/b/bench.log 2>&1
echo "=== bench done at $SECONDS s"; sed -n '/fixed cost/,/^| vyre-libs::graph::ast_walk_preorder/p' $OUT0/b/jit_time.txt | head -20
grep -E "_kernel " $OUT0/b/libs.txt | grep -v "^|" | grep -E "rms_norm|layer_norm|softmax|gelu|matmul_kernel" | cut -c1-150
T=/tmp/vb; cd $T; mkdir -p $T/h1 $T/h2 $T/h3
for r in 1 2; do
CUDA_CACHE_DISABLE=1 VYRE_AUTOTUNER=off HOME=$T/h$r timeout 60 ./vyre-compare --only corpus --deadline-s 50 --json $OUT0/b/corpus$r.json --markdown $OUT0/b/corpus$r.md > $OUT0/b/corpus$r.txt 2>&1; echo "corpus $r rc=$? at $SECONDS s"
grep -E "^corpus_first  |^corpus_warm " $OUT0/b/corpus$r.txt | cut -c1-220
done
VYRE_AUTOTUNER=off HOME=$T/h3 timeout 70 ./vyre-compare --only artifact --deadline-s 60 --json $OUT0/b/artifact.json --markdown $OUT0/b/artifact.md > $OUT0/b/artifact.txt 2>&1; echo "artifact rc=$? at $SECONDS s"
grep -E "^artifact" $OUT0/b/artifact.txt | cut -c1-220 | head -8
cd - > /dev/null
tar -C $OUT0 -czf $OUT0/bench.tgz b && rm -rf $OUT0/b
OUT=$OUT0 BUNDLE=.smrunT SEED=0x17c0de20f9 LIMIT=$((585 - SECONDS)) NF=12 bash scripts/device-suites.sh gpu_workgroup_tree gpu_semantics gpu_primitives fuzz_regressions calls driver_smoke gpu_pipeline gpu_grid_sync gpu_literal_extents gpu_artifact gpu_artifact_chain gpu_async gpu_half gpu_elementwise gpu_resident gpu_stress
grep -E "^=== |corpus fixtures|semantic cases run|cases x2" $OUT0/summary.txt | head -30
grep -h "fuzz: [0-9]* programs run" $OUT0/summary.txt | awk '{s+=$2; m+=$5} END {print "fuzz total", s, "programs,", m, "mismatches"}'
echo "all done at $SECONDS s"
