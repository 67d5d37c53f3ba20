set -uo pipefail
mkdir -p $OUT/d; T=/tmp/vd; rm -rf $T; mkdir -p $T/h1 $T/h2
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .smrunB/bundle.tar.xz $T
cd $T
for r in 1 2; do
CUDA_CACHE_DISABLE=1 VYRE_AUTOTUNER=off HOME=$T/h$r timeout 250 ./vyre-compare --only corpus --deadline-s 240 --json $OUT/d/corpus$r.json --markdown $OUT/d/corpus$r.md > $OUT/d/corpus$r.txt 2>&1; echo "corpus $r rc=$? at $SECONDS s"
grep -E "^\| corpus_" $OUT/d/corpus$r.md | cut -c1-220
done
cd $OUT && tar czf d.tgz d && rm -rf d
