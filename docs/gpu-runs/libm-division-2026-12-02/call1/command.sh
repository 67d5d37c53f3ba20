set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT0=$OUT; mkdir -p $OUT/b
OUT=$OUT0/b BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v48,ptx/incumbent,ptx/v47 > $OUT0/b/bench.log 2>&1
echo "=== bench done at $SECONDS s"; sed -n '/fixed cost/,/^| vyre-libs::graph::ast_walk_preorder/p' $OUT0/b/jit_time.txt | head -16
grep -E "gelu|logit_softcap|swiglu|silu|cross_entropy|reduce_mean" $OUT0/b/jit_time.txt | head -12
grep -E "_kernel " $OUT0/b/libs.txt | grep -v "^|" | sed -E 's/ *kernel time \(device events\), resident buffers, [^|]*\|//; s/floor: [^|]*\| //' | cut -c1-100
tar -C $OUT0 -czf $OUT0/bench.tgz b && rm -rf $OUT0/b
# tanh exhaustively (v48 changed it), on the extracted bundle after the suites
OUT=$OUT0 BUNDLE=.smrunT SEED=0x17c0de20f4 LIMIT=$((500 - SECONDS)) NF=12 bash scripts/device-suites.sh gpu_libm_sweep gpu_grid_sync gpu_semantics calls fuzz_regressions gpu_primitives gpu_literal_extents gpu_elementwise gpu_pipeline gpu_artifact gpu_artifact_chain gpu_async gpu_half driver_smoke gpu_resident gpu_stress
echo "=== suites done at $SECONDS s"
VYRE_CUDA_REQUIRE_GPU=1 VYRE_LIBM_SWEEP_EXHAUSTIVE=1 VYRE_LIBM_SWEEP_ONLY=tanhf timeout $((585 - SECONDS)) /tmp/vhead/bin/gpu_libm_sweep --nocapture --test-threads=1 every_input > $OUT0/exhaustive.log 2>&1; echo "exhaustive rc=$?"
tail -6 $OUT0/exhaustive.log
echo "all done at $SECONDS s"
