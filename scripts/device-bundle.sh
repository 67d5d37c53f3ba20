#!/usr/bin/env bash
# Build every test, bench and example binary in release mode and copy them, stripped, into
# .devrun/ (git-ignored) so a GPU machine without a Rust toolchain can run them:
#   bash scripts/device-bundle.sh [--ptxas] [--compare]
#       here; --ptxas: also the pinned ptxas binaries; --compare: also bench/compare's
#       vyre-compare (built, stripped and xz-compressed: scripts/device-bench.sh runs it)
#   bash scripts/device-run.sh               # on the GPU machine (with .devrun/ carried)
#   bash scripts/device-ptxas-sweep.sh       # the long ptxas sweep there (needs --ptxas)
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
        if name.startswith("gpu_") or name in ("registration", "calls", "driver_smoke", "fuzz_regressions", "fuzz_codegen", "deep_nesting"):
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
cargo build --release --examples --bins --quiet
echo "vyre-cuda-jit target/release/vyre-cuda-jit" >> .devrun/manifest
for example in target/release/examples/*; do
  [ -x "$example" ] && [ -f "$example" ] && case "$example" in *-*) ;; *) echo "example_$(basename "$example") $example" >> .devrun/manifest;; esac
done
mkdir -p .devrun/bin
while read -r name path; do cp "$path" ".devrun/bin/$name" && strip ".devrun/bin/$name"; done < .devrun/manifest
# With --compare, the comparison harness (its own crate graph), compressed apart from the
# test binaries: scripts/device-bench.sh unpacks and runs it.
if [[ " $* " == *" --compare "* ]]; then
  cargo build --release --quiet --manifest-path bench/compare/Cargo.toml
  strip -o .devrun/vyre-compare bench/compare/target/release/vyre-compare
  xz -T0 -6 -f .devrun/vyre-compare
fi
# With --ptxas, the pinned ptxas binaries (installed by scripts/test.sh) for the ptxas sweep
# (scripts/device-ptxas-sweep.sh): the device's CPUs assemble far more kernels per minute.
# Opt-in: with them the bundle and the tracked tree exceed the device's 64 MiB transfer.
if [[ " $* " == *" --ptxas "* ]]; then
  for tools in cuda-nvcc cuda-nvcc-cu12; do
    ptxas="$(find ".tools/$tools" -type f -name ptxas -path '*/bin/ptxas' 2>/dev/null | head -n 1)"
    [ -n "$ptxas" ] && cp "$ptxas" ".devrun/bin/ptxas-$tools"
  done
fi
# The device transfer is limited to 64 MiB: ship the binaries xz-compressed (unpacked there
# with python3's tarfile, which needs no xz binary).
tar -C .devrun -cf - bin | xz -T0 -6 > .devrun/bin.tar.xz && rm -rf .devrun/bin
du -sh .devrun && cut -d' ' -f1 .devrun/manifest
