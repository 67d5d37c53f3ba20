set -uo pipefail
mkdir -p $OUT/a
T=/tmp/vb; rm -rf $T; mkdir -p $T/home
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrunB/bundle.tar.xz $T
( cd $T && VYRE_AUTOTUNER=off HOME=$T/home timeout 150 ./vyre-compare --only artifact --deadline-s 140 --json $OUT/a/artifact.json --markdown $OUT/a/artifact.md > $OUT/a/artifact.txt 2>&1; echo "artifact rc=$? at $SECONDS s" )
grep -E "^\| artifact|NOT met|met " $OUT/a/artifact.md | head -20
cd $OUT && tar czf a.tgz a && rm -rf a && cd - > /dev/null
OUT=$OUT BUNDLE=.smrunT SEED=0x17c0de20e0 LIMIT=$((585 - SECONDS)) NF=0 bash scripts/device-suites.sh gpu_semantics calls fuzz_regressions gpu_primitives gpu_jit_levels gpu_elementwise gpu_pipeline gpu_artifact gpu_artifact_chain gpu_async gpu_grid_sync gpu_half driver_smoke gpu_resident gpu_stress
echo "all done at $SECONDS s"
