//! Assemble many emitted kernels with few `ptxas` runs.
//!
//! Every kernel the emitter writes is one module with one `.entry vyre_main` (and, when
//! libm ports are used, `.func`s). Kernels without `.func`s are concatenated into one
//! module under one header with their entries renamed `vyre_main_<i>` (registers,
//! labels and `.shared` arrays are scoped to their entry), which `ptxas` assembles
//! about twice as fast as one process per kernel. A failing batch is bisected down to
//! the failing kernels, which are then assembled alone for their own error text.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// One kernel to assemble: an identifier for reports and the PTX text.
pub struct Kernel {
    pub id: String,
    pub ptx: String,
}

/// `ptxas -arch=<arch>` on one PTX text; `Err` carries ptxas's output.
pub fn assemble_one(ptxas: &Path, ptx: &str, arch: &str) -> Result<(), String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let stem = std::env::temp_dir().join(format!("vyre-cuda-fuzz-{}-{n}", std::process::id()));
    let (ptx_path, cubin) = (stem.with_extension("ptx"), stem.with_extension("cubin"));
    std::fs::write(&ptx_path, ptx).map_err(|e| format!("{}: {e}", ptx_path.display()))?;
    let output = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-o")
        .arg(&cubin)
        .arg(&ptx_path)
        .output();
    let _ = std::fs::remove_file(&ptx_path);
    let _ = std::fs::remove_file(&cubin);
    let output = output.map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ptxas -arch={arch} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        ))
    }
}

/// The module header (`.version`, `.target`, `.address_size`) and the rest.
fn split_header(ptx: &str) -> Option<(&str, &str)> {
    let at = ptx.find(".address_size")?;
    let end = ptx[at..].find('\n').map_or(ptx.len(), |e| at + e + 1);
    Some((&ptx[..end], &ptx[end..]))
}

fn batchable(k: &Kernel) -> bool {
    !k.ptx.contains(".func") && split_header(&k.ptx).is_some()
}

fn combine(kernels: &[&Kernel]) -> String {
    let mut out = String::new();
    let header = split_header(&kernels[0].ptx).map_or("", |(h, _)| h);
    out.push_str(header);
    for (i, k) in kernels.iter().enumerate() {
        let (_, body) = split_header(&k.ptx).unwrap_or(("", &k.ptx));
        out.push_str(&body.replacen(".entry vyre_main(", &format!(".entry vyre_main_{i}("), 1));
        out.push('\n');
    }
    out
}

/// Assemble `kernels` (all emitted for the same target) for `arch`; returns the ids and
/// errors of the kernels that fail.
pub fn assemble_all(ptxas: &Path, kernels: &[Kernel], arch: &str) -> Vec<(String, String)> {
    let mut failures = Vec::new();
    let (batch, alone): (Vec<&Kernel>, Vec<&Kernel>) = kernels.iter().partition(|k| batchable(k));
    for k in alone {
        if let Err(e) = assemble_one(ptxas, &k.ptx, arch) {
            failures.push((k.id.clone(), e));
        }
    }
    bisect(ptxas, &batch, arch, &mut failures);
    failures
}

fn bisect(ptxas: &Path, kernels: &[&Kernel], arch: &str, failures: &mut Vec<(String, String)>) {
    if kernels.is_empty() {
        return;
    }
    if kernels.len() == 1 {
        if let Err(e) = assemble_one(ptxas, &kernels[0].ptx, arch) {
            failures.push((kernels[0].id.clone(), e));
        }
        return;
    }
    if assemble_one(ptxas, &combine(kernels), arch).is_ok() {
        return;
    }
    let (a, b) = kernels.split_at(kernels.len() / 2);
    bisect(ptxas, a, arch, failures);
    bisect(ptxas, b, arch, failures);
}
