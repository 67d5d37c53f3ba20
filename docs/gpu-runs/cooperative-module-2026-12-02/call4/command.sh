set -uo pipefail
OUT=$OUT BUNDLE=.smrunT SEED=0x17c0de20f3 LIMIT=$((380 - SECONDS)) NF=12 bash scripts/device-suites.sh gpu_grid_sync gpu_semantics calls fuzz_regressions gpu_primitives gpu_literal_extents gpu_elementwise gpu_pipeline gpu_artifact gpu_artifact_chain gpu_async gpu_half driver_smoke gpu_resident gpu_stress
echo "all done at $SECONDS s"
