#!/usr/bin/env bash
# Here: bundle every single-GPU test binary (and fuzz_regressions, calls, driver_smoke), the
# JIT helper, the quickstart example and (with --compare) vyre-compare, stripped, into
# $1/bin.tar.xz (default .smrun, git-ignored) for scripts/device-suites.sh:
#   bash scripts/device-bundle-gpu.sh .smrun [--compare]
set -euo pipefail
cd "$(dirname "$0")/.."
D=${1:-.smrun}
rm -rf $D && mkdir -p $D/bin
cargo test --release --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] != ["bin"]:
        n = m["target"]["name"]
        if (n.startswith("gpu_") and n not in ("gpu_cluster", "gpu_collectives", "gpu_nccl")) or n in ("calls", "driver_smoke", "fuzz_regressions"):
            print(n, m["executable"])
' > $D/manifest
cargo build --release --bins --examples --quiet
echo "vyre-cuda-jit target/release/vyre-cuda-jit" >> $D/manifest
echo "example_quickstart target/release/examples/quickstart" >> $D/manifest
while read -r n p; do cp "$p" $D/bin/$n && strip $D/bin/$n; done < $D/manifest
if [[ " $* " == *" --compare "* ]]; then
  cargo build --release --quiet --manifest-path bench/compare/Cargo.toml
  strip -o $D/bin/vyre-compare bench/compare/target/release/vyre-compare
fi
tar -C $D -cf - bin | xz -T0 -6 > $D/bin.tar.xz && rm -rf $D/bin
du -sh $D; cut -d' ' -f1 $D/manifest | tr '\n' ' '
