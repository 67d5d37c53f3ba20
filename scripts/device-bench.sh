#!/usr/bin/env bash
# The comparison harness on a GPU machine, from a bundle made with
# `bash scripts/device-bundle.sh --compare`:
#   bash scripts/device-bench.sh NAME [vyre-compare options]
# e.g. `CUDA_CACHE_DISABLE=1 bash scripts/device-bench.sh jit --only jit_probe` or
# `bash scripts/device-bench.sh libs --only libs`. Unpacks .devrun/vyre-compare.xz (with
# python3's lzma: no xz binary there) and runs it with VYRE_AUTOTUNER=off and an empty
# HOME; writes NAME.log, NAME.json and NAME.md into $OUT (or ./device-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bash scripts/device-bench.sh NAME [vyre-compare options]" >&2; exit 2; }
name="$1"; shift
[ -f .devrun/vyre-compare.xz ] || { echo "no .devrun/vyre-compare.xz: run scripts/device-bundle.sh --compare first" >&2; exit 2; }
out="${OUT:-device-logs}"; mkdir -p "$out"
compare="${TMPDIR:-/tmp}/vyre-compare"
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
  .devrun/vyre-compare.xz "$compare" && chmod +x "$compare" || { echo "cannot unpack vyre-compare" >&2; exit 2; }
VYRE_AUTOTUNER=off HOME="$(mktemp -d)" "$compare" --json "$out/$name.json" --markdown "$out/$name.md" "$@" \
  > "$out/$name.log" 2>&1
rc=$?
grep -E "^\| |NOT met|FAIL|!!!" "$out/$name.log" | tail -40
exit $rc
