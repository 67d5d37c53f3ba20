#!/usr/bin/env bash
# The single test command for vyre-cuda (see README): `bash scripts/test.sh`.
#
# 1. Installs the pinned offline PTX assembler (`ptxas` from the PyPI wheel
#    nvidia-cuda-nvcc==13.0.88) into .tools/cuda-nvcc/ if it is not there yet.
# 2. Exports VYRE_CUDA_PTXAS=<absolute path to that ptxas>, which the integration
#    tests use to assemble every emitted kernel for sm_80 and sm_90.
# 3. Runs cargo fmt --check, cargo clippy --all-targets -D warnings, cargo test --release.
#
# Needs: bash, python3 with pip (network access to PyPI on first run only), cargo.
# No GPU and no CUDA toolkit are needed. Works from any current directory.
set -euo pipefail

NVCC_WHEEL_VERSION="13.0.88"
# Where ptxas lies inside the wheel (checked for 13.0.88; other versions use
# nvidia/cu<major>/bin/ptxas or nvidia/cuda_nvcc/bin/ptxas, found by the fallback search).
PTXAS_REL="nvidia/cu13/bin/ptxas"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

TOOLS_DIR="$REPO_ROOT/.tools/cuda-nvcc"
STAMP="$TOOLS_DIR/nvidia_cuda_nvcc-${NVCC_WHEEL_VERSION}.dist-info"

section() {
    printf '\n==== %s ====\n' "$*"
}

die() {
    printf '\nERROR: %s\n' "$*" >&2
    exit 1
}

# Prints the path of ptxas under $1, or nothing.
find_ptxas() {
    local dir="$1"
    if [[ -f "$dir/$PTXAS_REL" ]]; then
        printf '%s\n' "$dir/$PTXAS_REL"
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

section "ptxas (nvidia-cuda-nvcc==${NVCC_WHEEL_VERSION}) -> .tools/cuda-nvcc"

PTXAS=""
if [[ -d "$STAMP" ]]; then
    PTXAS="$(find_ptxas "$TOOLS_DIR")"
    if check_ptxas "$PTXAS"; then
        echo "already installed: $PTXAS"
    else
        echo "existing install at $TOOLS_DIR is broken; reinstalling"
        PTXAS=""
    fi
elif [[ -e "$TOOLS_DIR" ]]; then
    echo "$TOOLS_DIR holds another or a partial install; reinstalling"
fi

if [[ -z "$PTXAS" ]]; then
    command -v python3 >/dev/null 2>&1 \
        || die "python3 not found; it is needed to install ptxas (pip install nvidia-cuda-nvcc==${NVCC_WHEEL_VERSION})."
    python3 -m pip --version >/dev/null 2>&1 \
        || die "python3 -m pip is not available; install pip (e.g. apt-get install python3-pip) and rerun."

    # Install into a scratch directory and move it in place only once it is complete,
    # so an interrupted run never leaves a half-installed .tools/cuda-nvcc behind.
    # --no-deps: ptxas is self-contained (links only libc/libm/libpthread/libgcc_s);
    # the wheel's dependencies (nvidia-nvvm, -cuda-runtime, -cuda-crt) are unpinned
    # and not needed.
    mkdir -p "$REPO_ROOT/.tools"
    STAGING="$(mktemp -d "$REPO_ROOT/.tools/cuda-nvcc.staging.XXXXXX")"
    trap 'rm -rf "$STAGING"' EXIT
    echo "installing nvidia-cuda-nvcc==${NVCC_WHEEL_VERSION} from PyPI (about 40 MB download) ..."
    start=$SECONDS
    # PIP_ROOT_USER_ACTION=ignore: no "running pip as root" warning in containers/CI.
    if ! PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$STAGING" "nvidia-cuda-nvcc==${NVCC_WHEEL_VERSION}"; then
        die "pip could not install nvidia-cuda-nvcc==${NVCC_WHEEL_VERSION} into .tools/cuda-nvcc.
       Check network access to PyPI (pypi.org, files.pythonhosted.org), or set
       PIP_INDEX_URL to a mirror, then rerun: bash scripts/test.sh"
    fi
    [[ -d "$STAGING/nvidia_cuda_nvcc-${NVCC_WHEEL_VERSION}.dist-info" ]] \
        || die "pip finished but nvidia_cuda_nvcc-${NVCC_WHEEL_VERSION}.dist-info is missing in $STAGING"
    rm -rf "$TOOLS_DIR"
    mv "$STAGING" "$TOOLS_DIR"
    trap - EXIT
    echo "installed in $((SECONDS - start)) s"

    PTXAS="$(find_ptxas "$TOOLS_DIR")"
    [[ -n "$PTXAS" ]] || die "the nvidia-cuda-nvcc wheel installed, but no bin/ptxas was found under $TOOLS_DIR"
    check_ptxas "$PTXAS" || die "$PTXAS does not run ('$PTXAS --version' failed)"
fi

export VYRE_CUDA_PTXAS="$PTXAS"
echo "VYRE_CUDA_PTXAS=$VYRE_CUDA_PTXAS"
"$VYRE_CUDA_PTXAS" --version | tail -n 2

section "cargo fmt --check"
cargo fmt --check

section "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

section "cargo test --release"
cargo test --release

if [[ "${VYRE_CUDA_CHECK_FUZZ:-0}" == 1 ]]; then
    # Opt-in (minutes: libFuzzer and an ASan build of the whole graph): the cargo-fuzz
    # crate still builds. Needs nightly and cargo-fuzz (fuzz/README.md).
    section "cargo +nightly fuzz build emit_ptx"
    (cd fuzz && cargo +nightly fuzz build emit_ptx)
fi

section "all checks passed"
