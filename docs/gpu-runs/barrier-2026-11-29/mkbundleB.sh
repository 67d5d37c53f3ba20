#!/usr/bin/env bash
# vyre-compare of HEAD + PTX dirs v24 (HEAD), v23 (.scratch/dump23, the tenth session's), incumbent
set -euo pipefail
cd /work/main
D=.smrunB; rm -rf $D && mkdir -p $D/b/ptx
cargo build --release --quiet --manifest-path bench/compare/Cargo.toml
strip -o $D/b/vyre-compare bench/compare/target/release/vyre-compare
rm -rf .scratch/dump24 && $D/b/vyre-compare --dump-ptx .scratch/dump24 > /dev/null
cp -r .scratch/dump24/corpus/vyre_cuda $D/b/ptx/v24
cp -r .scratch/dump23/corpus/vyre_cuda $D/b/ptx/v23
cp -r .scratch/dump24/corpus/incumbent $D/b/ptx/incumbent
tar -C $D/b -cf - . | xz -T0 -6 > $D/bundle.tar.xz && rm -rf $D/b
du -sh $D
