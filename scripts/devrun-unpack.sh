# Sourced by the scripts/device-*.sh scripts (from the repository root): checks that the
# bundle made by scripts/device-bundle.sh is there and sets bin_dir to its unpacked
# binaries, unpacking it (with python3's tarfile, which needs no xz binary) unless the same
# bundle is unpacked already. A warm machine keeps an older unpack: the checksum stamp
# makes sure a new bundle replaces it.
[ -f .devrun/bin.tar.xz ] || { echo "no .devrun bundle: run scripts/device-bundle.sh first" >&2; exit 2; }
bin_dir="${TMPDIR:-/tmp}/vyre-cuda-devrun"
bundle_stamp="$(cksum < .devrun/bin.tar.xz)"
if [ "$(cat "$bin_dir/stamp" 2>/dev/null)" != "$bundle_stamp" ]; then
  rm -rf "$bin_dir" && mkdir -p "$bin_dir" \
    && python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .devrun/bin.tar.xz "$bin_dir" \
    && printf '%s\n' "$bundle_stamp" > "$bin_dir/stamp" \
    || { echo "cannot unpack .devrun/bin.tar.xz into $bin_dir" >&2; exit 2; }
fi
