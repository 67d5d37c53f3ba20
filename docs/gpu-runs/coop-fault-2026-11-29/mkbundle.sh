#!/usr/bin/env bash
# Bundle every GPU test binary, vyre-cuda-jit and (with --compare) vyre-compare into $1/bin.tar.xz
set -euo pipefail
cd /work/main
D=${1:-.smrun21}
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
