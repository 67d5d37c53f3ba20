set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT0=$OUT; mkdir -p $OUT/b
OUT=$OUT0/b BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v51,ptx/incumbent,ptx/v50 > $OUT0/b/bench.log 2>&1
echo "=== bench done at $SECONDS s"; sed -n '/fixed cost/,/^| vyre-libs::graph::ast_walk_preorder/p' $OUT0/b/jit_time.txt | head -18
grep -E "cross_entropy|logit_softcap|reduce_mean|layer_norm|rms_norm|math::dot|workgroup_" $OUT0/b/jit_time.txt | head -14
grep -E "_kernel " $OUT0/b/libs.txt | grep -v "^|" | grep -E "rms_norm|layer_norm|softmax|gelu|matmul_kernel" | cut -c1-150
tar -C $OUT0 -czf $OUT0/bench.tgz b && rm -rf $OUT0/b
OUT=$OUT0 BUNDLE=.smrunT1 SEED=0x17c0de20f8 LIMIT=$((585 - SECONDS)) NF=12 bash scripts/device-suites.sh gpu_workgroup_tree gpu_semantics gpu_primitives fuzz_regressions calls driver_smoke gpu_pipeline
head -30 $OUT0/summary.txt
grep -h "fuzz: [0-9]* programs run" $OUT0/summary.txt | awk '{s+=$2; m+=$5} END {print "fuzz total", s, "programs,", m, "mismatches"}'
echo "all done at $SECONDS s"
