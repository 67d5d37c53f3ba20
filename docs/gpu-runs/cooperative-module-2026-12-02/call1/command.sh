set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
OUT0=$OUT
mkdir -p $OUT/b && OUT=$OUT0/b BUNDLE=.smrunB bash scripts/device-bench-jit-libs.sh ptx/v46,ptx/incumbent,ptx/v45
echo "jit+libs(v46) done at $SECONDS s"
# libs rows from the v45 harness, then v46 again, each its own process (alternating A/B)
H45=/tmp/h45; mkdir -p $H45; xz -dc .smrunB/h45/vyre-compare.xz > $H45/vyre-compare; chmod +x $H45/vyre-compare
timeout 110 $H45/vyre-compare --only libs --deadline-s 90 --json $OUT0/b/libs45.json --markdown $OUT0/b/libs45.md > $OUT0/b/libs45.txt 2>&1; echo "libs45 rc=$? at $SECONDS s"
grep -E "_kernel " $OUT0/b/libs45.txt | cut -c1-170 | head -40
timeout 110 /tmp/vb/vyre-compare --only libs --deadline-s 90 --json $OUT0/b/libs46b.json --markdown $OUT0/b/libs46b.md > $OUT0/b/libs46b.txt 2>&1; echo "libs46b rc=$? at $SECONDS s"
grep -E "_kernel " $OUT0/b/libs46b.txt | cut -c1-170 | head -40
tar -C $OUT0 -czf $OUT0/bench.tgz b && rm -rf $OUT0/b
echo "all done at $SECONDS s"
