#!/usr/bin/env bash
# Here: the comparison harness (vyre-compare, stripped) and corpus PTX directories for
# scripts/device-bench.sh, packed into $1/bundle.tar.xz (default .smrunB, git-ignored):
#   bash scripts/device-bundle-bench.sh .smrunB NAME [OLD_NAME=DUMP_DIR ...]
# NAME names this tree's corpus PTX (`vyre-compare --dump-ptx`, e.g. v26); each
# OLD_NAME=DUMP_DIR adds an earlier dump's corpus (DUMP_DIR/corpus/vyre_cuda) to compare
# with; the incumbent's corpus is always added as `incumbent`.
set -euo pipefail
cd "$(dirname "$0")/.."
D=${1:-.smrunB}; NAME=${2:?name for the PTX of this tree, e.g. v26}; shift 2 || true
rm -rf $D && mkdir -p $D/b/ptx
cargo build --release --quiet --manifest-path bench/compare/Cargo.toml
strip -o $D/b/vyre-compare bench/compare/target/release/vyre-compare
DUMP=.scratch/dump-$NAME; rm -rf $DUMP && $D/b/vyre-compare --dump-ptx $DUMP > /dev/null
cp -r $DUMP/corpus/vyre_cuda $D/b/ptx/$NAME
cp -r $DUMP/corpus/incumbent $D/b/ptx/incumbent
for old in "$@"; do cp -r "${old#*=}/corpus/vyre_cuda" "$D/b/ptx/${old%%=*}"; done
tar -C $D/b -cf - . | xz -T0 -6 > $D/bundle.tar.xz && rm -rf $D/b
du -sh $D
