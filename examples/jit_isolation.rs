//! What the isolated JIT (`VYRE_CUDA_JIT_HELPER`) costs: the first dispatch of every
//! vyre-primitives fixture program that vyre-cuda lowers (each one a compile, a load and a
//! run), in this process's mode, plus the device memory the helper's own CUDA context
//! takes. Run each mode in its own fresh process with the driver's JIT cache disabled:
//!
//! ```sh
//! CUDA_CACHE_DISABLE=1 cargo run --release --example jit_isolation -- in-process
//! CUDA_CACHE_DISABLE=1 VYRE_CUDA_JIT_HELPER=target/release/vyre-cuda-jit \
//!     cargo run --release --example jit_isolation -- isolated
//! ```
//!
//! (`isolated` without `VYRE_CUDA_JIT_HELPER` uses the `vyre-cuda-jit` beside this
//! example's executable.)

use std::path::PathBuf;
use std::time::{Duration, Instant};
use vyre_cuda::{CudaBackend, CudaOptions};
use vyre_driver::DispatchConfig;
// Their operations register only when the crates are linked.
use vyre_libs as _;
use vyre_primitives as _;

/// `vyre-cuda-jit` in this executable's folder or the one above (cargo puts examples in
/// `target/release/examples/`, binaries in `target/release/`).
fn helper_beside_this_executable() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("vyre-cuda-jit"))
        .find(|helper| helper.is_file())
}

fn main() {
    let mode = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "in-process".into());
    let mut options = CudaOptions::from_env().expect("options");
    match mode.as_str() {
        "in-process" => options.jit_helper = None,
        "isolated" => {
            if options.jit_helper.is_none() {
                options.jit_helper = helper_beside_this_executable();
            }
            if options.jit_helper.is_none() {
                eprintln!("isolated mode needs VYRE_CUDA_JIT_HELPER=<path to vyre-cuda-jit>");
                std::process::exit(2);
            }
        }
        other => {
            eprintln!("usage: jit_isolation [in-process|isolated] (got {other})");
            std::process::exit(2);
        }
    }
    let start = Instant::now();
    let backend = match CudaBackend::with_options(options) {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("no CUDA GPU available, nothing to measure: {error}");
            std::process::exit(2);
        }
    };
    backend.prepare().expect("prepare");
    let opened = start.elapsed();
    let (free_before, _) = backend.memory_info().expect("memory info");
    let mut firsts: Vec<(Duration, &str)> = Vec::new();
    let mut failed = 0usize;
    for entry in vyre_foundation::operation::OperationRegistry::global().iter() {
        let (Some(build), Some(inputs)) = (entry.build, entry.test_inputs) else {
            continue;
        };
        let program = build();
        let config = DispatchConfig::default();
        if backend.emit(&program, &config).is_err() {
            continue;
        }
        let Some(case) = inputs().into_iter().next() else {
            continue;
        };
        let t = Instant::now();
        if let Err(error) = backend.dispatch(&program, &case, &config) {
            if matches!(error, vyre_cuda::CudaError::JitHelper { .. }) {
                eprintln!("{}: {error}", entry.id);
                failed += 1;
            }
        }
        firsts.push((t.elapsed(), entry.id));
    }
    let (free_after, _) = backend.memory_info().expect("memory info");
    let total: Duration = firsts.iter().map(|(d, _)| *d).sum();
    let mut sorted: Vec<Duration> = firsts.iter().map(|(d, _)| *d).collect();
    sorted.sort();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
    let first = firsts.first().map(|(d, _)| *d).unwrap_or_default();
    println!(
        "jit_isolation mode={mode} device={} cache_disabled={}",
        backend.device_info().name,
        std::env::var("CUDA_CACHE_DISABLE").is_ok_and(|v| v == "1")
    );
    println!(
        "  backend open + prepare {:.1} ms; {} programs: first dispatches total {:.1} ms, median {:.2} ms, first program {:.1} ms; {failed} helper failures",
        opened.as_secs_f64() * 1e3,
        firsts.len(),
        total.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3,
    );
    println!(
        "  device memory free before the first compile {} MiB, after the last {} MiB (difference {} MiB: the helper's context in isolated mode)",
        free_before >> 20,
        free_after >> 20,
        (free_before as i64 - free_after as i64) >> 20
    );
}
