//! The offline PTX gate: assemble emitted PTX with NVIDIA's `ptxas` (no GPU needed).
//!
//! `bash scripts/test.sh` installs the pinned `ptxas` (PyPI wheel `nvidia-cuda-nvcc==13.0.88`)
//! into `.tools/cuda-nvcc/` and exports `VYRE_CUDA_PTXAS`. A plain `cargo test` finds it there
//! too; with no `ptxas` at all the gate tests skip locally and fail under CI.
//!
//! Typical use in a test:
//!
//! ```ignore
//! mod common;
//! use common::ptxas;
//!
//! #[test]
//! fn kernel_assembles() {
//!     let Some(ptxas) = ptxas::require_ptxas() else { return };
//!     let ptx = /* emit with `.target sm_90` */;
//!     ptxas::assemble_for(&ptxas, &ptx).unwrap_or_else(|e| panic!("{e}"));
//! }
//! ```

#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Environment variable naming the `ptxas` executable to use.
pub const PTXAS_ENV: &str = "VYRE_CUDA_PTXAS";

/// Set to `1` to make a missing `ptxas` a test failure instead of a skip (as `CI` does).
pub const REQUIRE_ENV: &str = "VYRE_CUDA_REQUIRE_PTXAS";

/// Environment variable naming the CUDA 12 line's `ptxas` (the `nvidia-cuda-nvcc-cu12`
/// wheel, 12.9.86). A user's driver JITs with the compiler of its own CUDA version, so
/// every kernel the gate assembles with the pinned CUDA 13 `ptxas` is assembled with this
/// one too, where its PTX ISA is one CUDA 12.9 reads.
pub const PTXAS_CU12_ENV: &str = "VYRE_CUDA_PTXAS_CU12";

/// The newest PTX ISA (major, minor) the CUDA 12.9 `ptxas` reads. Newer modules are
/// written only for drivers of CUDA 13 and later (`PtxTarget::for_device`), which JIT
/// with the CUDA 13 compiler.
const CU12_NEWEST_ISA: (u32, u32) = (8, 8);

/// The targets every kernel must assemble for.
pub const GATE_TARGETS: [u32; 2] = [80, 90];

/// [`GATE_TARGETS`] as `-arch` values.
pub const GATE_ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// How many PTX lines an assembly error quotes.
const LISTING_LINES: usize = 40;

/// The CUDA 12 `ptxas`: `$VYRE_CUDA_PTXAS_CU12`, else
/// `<CARGO_MANIFEST_DIR>/.tools/cuda-nvcc-cu12/**/ptxas` (where `scripts/test.sh` puts it).
/// `None` (and a one-line note) when absent; under `CI` or `VYRE_CUDA_REQUIRE_PTXAS=1` a
/// missing one is a failure.
pub fn cu12_ptxas() -> Option<PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            if let Some(p) = std::env::var_os(PTXAS_CU12_ENV).filter(|p| !p.is_empty()) {
                let p = PathBuf::from(p);
                if p.is_file() {
                    return Some(p);
                }
            }
            let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/cuda-nvcc-cu12");
            let found = find_in_tree(&tools, OsStr::new("ptxas"), 8);
            if found.is_none() {
                let required = std::env::var_os("CI").is_some()
                    || std::env::var_os(REQUIRE_ENV).is_some_and(|v| v == "1");
                assert!(
                    !required,
                    "the CUDA 12 ptxas is required here (CI or {REQUIRE_ENV}=1) and was not \
                     found. Fix: run `bash scripts/test.sh` (it installs nvidia-cuda-nvcc-cu12==12.9.86 \
                     into .tools/cuda-nvcc-cu12/), or set {PTXAS_CU12_ENV}."
                );
                eprintln!("note: CUDA 12 ptxas not found; assembling with CUDA 13 only");
            }
            found
        })
        .clone()
}

/// Whether the CUDA 12 `ptxas` reads `ptx`'s `.version`.
pub fn cu12_reads(ptx: &str) -> bool {
    ptx_isa(ptx).is_some_and(|isa| isa <= CU12_NEWEST_ISA)
}

/// The `.version` of a PTX module as (major, minor).
pub fn ptx_isa(ptx: &str) -> Option<(u32, u32)> {
    let line = ptx
        .lines()
        .find_map(|l| l.trim().strip_prefix(".version"))?;
    let (major, minor) = line.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.trim().parse().ok()?))
}

/// Finds `ptxas`: `$VYRE_CUDA_PTXAS` if set and it exists, else
/// `<CARGO_MANIFEST_DIR>/.tools/cuda-nvcc/**/ptxas` (where `scripts/test.sh` installs it),
/// else `ptxas` on `PATH`.
pub fn ptxas_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PTXAS_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Some(p);
        }
    }
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/cuda-nvcc");
    if let Some(p) = find_in_tree(&tools, OsStr::new("ptxas"), 8) {
        return Some(p);
    }
    find_on_path("ptxas")
}

/// Returns `ptxas`, or — when none is found — skips (prints one line to stderr and returns
/// `None`) locally, and panics with install instructions if `CI` is set (to any value) or
/// `VYRE_CUDA_REQUIRE_PTXAS=1`.
pub fn require_ptxas() -> Option<PathBuf> {
    if let Some(p) = ptxas_path() {
        return Some(p);
    }
    let required =
        std::env::var_os("CI").is_some() || std::env::var_os(REQUIRE_ENV).is_some_and(|v| v == "1");
    if required {
        let env_note = match std::env::var_os(PTXAS_ENV) {
            Some(v) if !v.is_empty() => {
                format!(" ({PTXAS_ENV}={} does not exist)", Path::new(&v).display())
            }
            _ => String::new(),
        };
        panic!(
            "ptxas not found{env_note}, and it is required here (CI or {REQUIRE_ENV}=1).\n\
             Fix: run `bash scripts/test.sh`, which installs ptxas from the PyPI wheel \
             nvidia-cuda-nvcc==13.0.88 into .tools/cuda-nvcc/ and runs the tests; or point \
             {PTXAS_ENV} at a ptxas executable (CUDA 13)."
        );
    }
    eprintln!("skipped: ptxas not found (run bash scripts/test.sh to install it)");
    None
}

/// Assembles `ptx` with `ptxas -arch=sm_<sm>`. On failure the error holds ptxas's stderr and
/// stdout and the first 40 lines of the PTX, numbered.
pub fn assemble(ptxas: &Path, ptx: &str, sm: u32) -> Result<(), String> {
    assemble_arch(ptxas, ptx, &format!("sm_{sm}"))
}

/// Assembles `ptx` for sm_80 and for sm_90. Only PTX whose `.target` is at most sm_80 can
/// pass both (ptxas needs `-arch` >= `.target`); for PTX emitted once per target use
/// [`assemble_for`].
pub fn assemble_all_targets(ptxas: &Path, ptx: &str) -> Result<(), String> {
    for sm in GATE_TARGETS {
        assemble(ptxas, ptx, sm)?;
    }
    Ok(())
}

/// Assembles `ptx` with the `-arch` named by its own `.target sm_NN` directive
/// (`sm_90a`-style suffixes kept).
pub fn assemble_for(ptxas: &Path, ptx: &str) -> Result<(), String> {
    let arch = ptx_target(ptx).ok_or_else(|| {
        format!(
            "the PTX has no `.target sm_NN` directive, so its -arch is unknown\n{}",
            listing(ptx)
        )
    })?;
    assemble_arch(ptxas, ptx, &arch)
}

/// The architecture of the PTX's `.target` directive, e.g. `"sm_90"` for
/// `.target sm_90` or `"sm_90a"` for `.target sm_90a, debug`.
pub fn ptx_target(ptx: &str) -> Option<String> {
    ptx.lines().find_map(|line| {
        let code = line.split("//").next().unwrap_or("").trim();
        let rest = code.strip_prefix(".target")?;
        if !rest.starts_with(char::is_whitespace) {
            return None;
        }
        rest.split(|c: char| c == ',' || c.is_whitespace())
            .find(|t| !t.is_empty())
            .filter(|t| {
                t.strip_prefix("sm_").is_some_and(|n| {
                    n.starts_with(|c: char| c.is_ascii_digit())
                        && n.chars().all(|c| c.is_ascii_alphanumeric())
                })
            })
            .map(str::to_owned)
    })
}

/// `assemble` with a free-form `-arch` (e.g. `sm_90a`), then the same with the CUDA 12
/// `ptxas` when it is installed and reads the module's ISA.
pub fn assemble_arch(ptxas: &Path, ptx: &str, arch: &str) -> Result<(), String> {
    assemble_with(ptxas, ptx, arch)?;
    match cu12_ptxas() {
        Some(cu12) if cu12_reads(ptx) => assemble_with(&cu12, ptx, arch)
            .map_err(|e| format!("CUDA 12 ptxas ({}): {e}", cu12.display())),
        _ => Ok(()),
    }
}

/// One `ptxas -arch=<arch>` run.
pub fn assemble_with(ptxas: &Path, ptx: &str, arch: &str) -> Result<(), String> {
    let scratch = Scratch::new();
    fs::write(&scratch.ptx, ptx)
        .map_err(|e| format!("cannot write {}: {e}", scratch.ptx.display()))?;
    let output = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-o")
        .arg(&scratch.cubin)
        .arg(&scratch.ptx)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "ptxas -arch={arch} failed ({status})\n--- stderr ---\n{stderr}--- stdout ---\n{stdout}\
         --- PTX (first {LISTING_LINES} lines) ---\n{listing}",
        status = output.status,
        stderr = String::from_utf8_lossy(&output.stderr),
        stdout = String::from_utf8_lossy(&output.stdout),
        listing = listing(ptx),
    ))
}

/// The first [`LISTING_LINES`] lines of `ptx`, numbered from 1 as ptxas numbers them.
fn listing(ptx: &str) -> String {
    let mut out = String::new();
    for (i, line) in ptx.lines().take(LISTING_LINES).enumerate() {
        out.push_str(&format!("{:>4} | {line}\n", i + 1));
    }
    let total = ptx.lines().count();
    if total > LISTING_LINES {
        out.push_str(&format!(
            "     ... ({} more lines)\n",
            total - LISTING_LINES
        ));
    }
    out
}

/// Unique temp paths (`<tmp>/vyre-cuda-ptxas-<pid>-<n>.{ptx,cubin}`), removed on drop.
struct Scratch {
    ptx: PathBuf,
    cubin: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let stem = std::env::temp_dir().join(format!("vyre-cuda-ptxas-{}-{n}", std::process::id()));
        Scratch {
            ptx: stem.with_extension("ptx"),
            cubin: stem.with_extension("cubin"),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.ptx);
        let _ = fs::remove_file(&self.cubin);
    }
}

/// Depth-limited search for a regular file named `name` under `dir`, in sorted order.
fn find_in_tree(dir: &Path, name: &OsStr, depth: usize) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    if let Some(hit) = entries
        .iter()
        .find(|p| p.file_name() == Some(name) && p.is_file())
    {
        return Some(hit.clone());
    }
    if depth == 0 {
        return None;
    }
    entries
        .iter()
        .filter(|p| p.is_dir())
        .find_map(|p| find_in_tree(p, name, depth - 1))
}

/// `which name` over `PATH`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

#[cfg(unix)]
fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(p: &Path) -> bool {
    p.is_file()
}
