#!/usr/bin/env bash
# vyre-compare of HEAD + PTX dirs v23 (HEAD), v21 (.scratch/dump, ed11d31), incumbent
set -euo pipefail
cd /work/main
D=.smrunB; rm -rf $D && mkdir -p $D/b/ptx
cargo build --release --quiet --manifest-path bench/compare/Cargo.toml
strip -o $D/b/vyre-compare bench/compare/target/release/vyre-compare
rm -rf .scratch/dump23 && $D/b/vyre-compare --dump-ptx .scratch/dump23 > /dev/null
cp -r .scratch/dump23/corpus/vyre_cuda $D/b/ptx/v23
cp -r .scratch/dump/corpus/vyre_cuda $D/b/ptx/v21
cp -r .scratch/dump23/corpus/incumbent $D/b/ptx/incumbent
tar -C $D/b -cf - . | xz -T0 -6 > $D/bundle.tar.xz && rm -rf $D/b
du -sh $D
