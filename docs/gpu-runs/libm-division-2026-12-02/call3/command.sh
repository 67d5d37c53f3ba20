set -uo pipefail
OUT=$OUT BUNDLE=.smrunT3 SEED=0x17c0de20f6 LIMIT=250 NF=12 bash scripts/device-suites.sh gpu_grid_sync gpu_literal_extents gpu_artifact gpu_artifact_chain gpu_async gpu_half gpu_resident gpu_stress
echo "all done at $SECONDS s"
