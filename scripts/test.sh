#!/usr/bin/env bash
# The single test command for vyre-cuda (see README): `bash scripts/test.sh`.
#
# 1. Installs the pinned offline PTX assemblers (`ptxas` from the PyPI wheels
#    nvidia-cuda-nvcc==13.0.88 and nvidia-cuda-nvcc-cu12==12.9.86) into
#    .tools/cuda-nvcc/ and .tools/cuda-nvcc-cu12/ if they are not there yet.
# 2. Exports VYRE_CUDA_PTXAS and VYRE_CUDA_PTXAS_CU12 (absolute paths), which the
#    integration tests use to assemble every emitted kernel for sm_80 and sm_90.
# 3. Runs cargo fmt --check, the layer check (scripts/check_layers.py),
#    cargo clippy --all-targets -D warnings, cargo test --release.
# 4. Runs the tests of the comparison harness bench/compare (its own crate graph and
#    Cargo.lock): vyre-cuda linked beside vyre-driver-cuda 0.7.2 (tests/links_both.rs).
#
# Needs: bash, python3 with pip (network access to PyPI on first run only), cargo.
# No GPU and no CUDA toolkit are needed. Works from any current directory.
set -euo pipefail

# The pinned offline PTX assemblers: CUDA 13's (the gate's main compiler) and the CUDA 12
# line's (a user's driver JITs with the compiler of its own CUDA version). Where ptxas
# lies inside each wheel was checked for these versions; other versions are found by the
# fallback search.
NVCC_WHEEL_VERSION="13.0.88"
NVCC_CU12_WHEEL_VERSION="12.9.86"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

section() {
    printf '\n==== %s ====\n' "$*"
}

die() {
    printf '\nERROR: %s\n' "$*" >&2
    exit 1
}

# Prints the path of ptxas under $1 ($2: its expected place inside the wheel), or nothing.
find_ptxas() {
    local dir="$1" rel="$2"
    if [[ -f "$dir/$rel" ]]; then
        printf '%s\n' "$dir/$rel"
        return 0
    fi
    [[ -d "$dir" ]] || return 0
    find "$dir" -type f -name ptxas -path '*/bin/ptxas' 2>/dev/null | sort | head -n 1
}

# Makes $1 executable if pip dropped the bit, then checks that it runs.
check_ptxas() {
    local p="$1"
    [[ -n "$p" && -f "$p" ]] || return 1
    [[ -x "$p" ]] || chmod +x "$p" || return 1
    "$p" --version >/dev/null 2>&1
}

# install_ptxas WHEEL VERSION DIR REL: installs the PyPI wheel WHEEL==VERSION into
# .tools/DIR (once) and sets PTXAS to the ptxas inside it.
install_ptxas() {
    local wheel="$1" version="$2" tools_dir="$REPO_ROOT/.tools/$3" rel="$4"
    local stamp="$tools_dir/${wheel//-/_}-${version}.dist-info"
    section "ptxas ($wheel==$version) -> .tools/$3"
    PTXAS=""
    if [[ -d "$stamp" ]]; then
        PTXAS="$(find_ptxas "$tools_dir" "$rel")"
        if check_ptxas "$PTXAS"; then
            echo "already installed: $PTXAS"
            return 0
        fi
        echo "existing install at $tools_dir is broken; reinstalling"
        PTXAS=""
    elif [[ -e "$tools_dir" ]]; then
        echo "$tools_dir holds another or a partial install; reinstalling"
    fi
    command -v python3 >/dev/null 2>&1 \
        || die "python3 not found; it is needed to install ptxas (pip install $wheel==$version)."
    python3 -m pip --version >/dev/null 2>&1 \
        || die "python3 -m pip is not available; install pip (e.g. apt-get install python3-pip) and rerun."

    # Install into a scratch directory and move it in place only once it is complete,
    # so an interrupted run never leaves a half-installed directory behind.
    # --no-deps: ptxas is self-contained (links only libc/libm/libpthread/libgcc_s);
    # the wheel's dependencies (nvidia-nvvm, -cuda-runtime, -cuda-crt) are not needed.
    mkdir -p "$REPO_ROOT/.tools"
    local staging
    staging="$(mktemp -d "$REPO_ROOT/.tools/$3.staging.XXXXXX")"
    trap 'rm -rf "$staging"' EXIT
    echo "installing $wheel==$version from PyPI (about 40 MB download) ..."
    local start=$SECONDS
    # PIP_ROOT_USER_ACTION=ignore: no "running pip as root" warning in containers/CI.
    if ! PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$staging" "$wheel==$version"; then
        die "pip could not install $wheel==$version into .tools/$3.
       Check network access to PyPI (pypi.org, files.pythonhosted.org), or set
       PIP_INDEX_URL to a mirror, then rerun: bash scripts/test.sh"
    fi
    [[ -d "$staging/${wheel//-/_}-${version}.dist-info" ]] \
        || die "pip finished but ${wheel//-/_}-${version}.dist-info is missing in $staging"
    rm -rf "$tools_dir"
    mv "$staging" "$tools_dir"
    trap - EXIT
    echo "installed in $((SECONDS - start)) s"

    PTXAS="$(find_ptxas "$tools_dir" "$rel")"
    [[ -n "$PTXAS" ]] || die "the $wheel wheel installed, but no bin/ptxas was found under $tools_dir"
    check_ptxas "$PTXAS" || die "$PTXAS does not run ('$PTXAS --version' failed)"
}

install_ptxas nvidia-cuda-nvcc "$NVCC_WHEEL_VERSION" cuda-nvcc nvidia/cu13/bin/ptxas
export VYRE_CUDA_PTXAS="$PTXAS"
echo "VYRE_CUDA_PTXAS=$VYRE_CUDA_PTXAS"
"$VYRE_CUDA_PTXAS" --version | tail -n 2

install_ptxas nvidia-cuda-nvcc-cu12 "$NVCC_CU12_WHEEL_VERSION" cuda-nvcc-cu12 nvidia/cuda_nvcc/bin/ptxas
export VYRE_CUDA_PTXAS_CU12="$PTXAS"
echo "VYRE_CUDA_PTXAS_CU12=$VYRE_CUDA_PTXAS_CU12"
"$VYRE_CUDA_PTXAS_CU12" --version | tail -n 2

section "cargo fmt --check"
cargo fmt --check

section "layers (scripts/check_layers.py)"
python3 scripts/check_layers.py || die "an import runs up a layer or closes a circle (see above)"

section "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

section "cargo test --release"
cargo test --release

# The comparison harness is its own crate graph (its own [workspace] and Cargo.lock, target
# dir bench/compare/target): its tests link vyre-cuda next to vyre-driver-cuda 0.7.2 and
# check that vyre's backend registry stays valid with both (without a GPU the device half
# prints "skipped: no CUDA device").
section "cargo test --release --manifest-path bench/compare/Cargo.toml"
cargo test --release --manifest-path bench/compare/Cargo.toml

if [[ "${VYRE_CUDA_CHECK_FUZZ:-0}" == 1 ]]; then
    # Opt-in (minutes: libFuzzer and an ASan build of the whole graph): the cargo-fuzz
    # crate still builds. Needs nightly and cargo-fuzz (fuzz/README.md).
    section "cargo +nightly fuzz build emit_ptx"
    (cd fuzz && cargo +nightly fuzz build emit_ptx)
fi

section "all checks passed"
