#!/usr/bin/env bash
# Build every test, bench and example binary in release mode and copy them, stripped, into
# .devrun/ (git-ignored) so a GPU machine without a Rust toolchain can run them:
#   bash scripts/device-bundle.sh            # here
#   bash scripts/device-run.sh               # on the GPU machine (with .devrun/ carried)
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .devrun && mkdir -p .devrun
cargo test --release --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] != ["bin"]:
        name = m["target"]["name"]
        if name.startswith("gpu_") or name in ("registration", "driver_smoke"):
            print(name, m["executable"])
' > .devrun/manifest
cargo bench --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        print("bench_" + m["target"]["name"], m["executable"])
' >> .devrun/manifest
cargo build --release --examples --quiet
for example in target/release/examples/*; do
  [ -x "$example" ] && [ -f "$example" ] && case "$example" in *-*) ;; *) echo "example_$(basename "$example") $example" >> .devrun/manifest;; esac
done
mkdir -p .devrun/bin
while read -r name path; do cp "$path" ".devrun/bin/$name" && strip ".devrun/bin/$name"; done < .devrun/manifest
# The device transfer is limited to 64 MiB: ship the binaries compressed.
tar -C .devrun -czf .devrun/bin.tar.gz bin && rm -rf .devrun/bin
du -sh .devrun && cut -d' ' -f1 .devrun/manifest
