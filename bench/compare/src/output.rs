//! The modes that need no GPU (`--dump-ptx`, `--render`) and the end of every run: the
//! tables on stdout, the SVG chart and the markdown copy.

use crate::cli::Opts;
use crate::engines::floor::ptx;
use crate::programs::{self, ALPHA, SALT};
use crate::report::{Outcome, Report};
use std::path::Path;
use vyre_driver::DispatchConfig;

/// `--dump-ptx DIR`: the floor's PTX (for `ptxas`), both backends' PTX for the
/// cold-compile program, and both backends' module for every corpus program
/// (`DIR/corpus/{vyre_cuda,incumbent}/<id>.ptx`, the texts `jit_probe` loads).
pub fn dump_ptx(dir: &Path) {
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(
        dir.join("floor_main.ptx"),
        ptx::main_module(9, 0, SALT, ALPHA),
    );
    let _ = std::fs::write(dir.join("floor_cold.ptx"), ptx::cold_module(9, 0, 12345));
    // The two backends' PTX for the same cold-compile program, for comparison.
    let program = programs::vadd(1024, 12345);
    let config = DispatchConfig::default();
    if let Ok(k) = vyre_cuda::codegen::emit_ptx(
        &program,
        config.workgroup_override,
        vyre_cuda::codegen::PtxTarget::sm90(),
    ) {
        let _ = std::fs::write(dir.join("vyre_cuda_cold.ptx"), k.ptx);
    }
    if let Ok(text) = vyre_driver_cuda::codegen::program_to_ptx_for_sm(&program, &config, 90) {
        let _ = std::fs::write(dir.join("incumbent_cold.ptx"), text);
    }
    dump_corpus(&dir.join("corpus"));
    dump_libs(&dir.join("libs"));
    println!("wrote {}", dir.display());
}

fn dump_corpus(dir: &Path) {
    let (ours, theirs) = (dir.join("vyre_cuda"), dir.join("incumbent"));
    let _ = std::fs::create_dir_all(&ours);
    let _ = std::fs::create_dir_all(&theirs);
    // The target vyre-cuda picks on the H100/H200 with a CUDA 13 driver (jit_probe's texts).
    let target = vyre_cuda::codegen::PtxTarget::new(90, vyre_cuda::codegen::PtxIsa::new(9, 0))
        .unwrap_or_else(|_| vyre_cuda::codegen::PtxTarget::sm90());
    for fixture in crate::workloads::corpus::corpus() {
        let program = (fixture.build)();
        let file = format!("{}.ptx", fixture.id.replace("::", "__"));
        let mut config = DispatchConfig::default();
        if let Ok(k) = vyre_cuda::codegen::emit_ptx(&program, None, target) {
            // The module the fixture's first dispatch loads: a kernel with grid-wide
            // barriers runs its cooperative module where the grid fits resident, as every
            // fixture's does.
            let _ = std::fs::write(ours.join(&file), k.cooperative_ptx.unwrap_or(k.ptx));
        }
        if programs::needs_ulp_budget(&program) {
            config.ulp_budget = Some(crate::engines::incumbent::ULP_BUDGET);
        }
        if let Ok(text) = vyre_driver_cuda::codegen::program_to_ptx_for_sm(&program, &config, 90) {
            let _ = std::fs::write(theirs.join(&file), text);
        }
    }
}

/// Both backends' PTX for every vyre-libs workload at the size the benchmark runs
/// (`DIR/libs/{vyre_cuda,incumbent}/<id>.ptx`), to compare the kernels the libs rows time.
fn dump_libs(dir: &Path) {
    let (ours, theirs) = (dir.join("vyre_cuda"), dir.join("incumbent"));
    let _ = std::fs::create_dir_all(&ours);
    let _ = std::fs::create_dir_all(&theirs);
    for spec in crate::workloads::libs::build::specs() {
        let Ok(program) = (spec.build)(spec.large) else {
            continue;
        };
        let file = format!("{}.ptx", spec.id);
        if let Ok(k) =
            vyre_cuda::codegen::emit_ptx(&program, None, vyre_cuda::codegen::PtxTarget::sm90())
        {
            let _ = std::fs::write(ours.join(&file), k.ptx);
            if let Some(cooperative) = k.cooperative_ptx {
                let _ = std::fs::write(ours.join(format!("{}.coop.ptx", spec.id)), cooperative);
            }
        }
        let mut config = DispatchConfig::default();
        if programs::needs_ulp_budget(&program) {
            config.ulp_budget = Some(crate::engines::incumbent::ULP_BUDGET);
        }
        if let Ok(text) = vyre_driver_cuda::codegen::program_to_ptx_for_sm(&program, &config, 90) {
            let _ = std::fs::write(theirs.join(&file), text);
        }
    }
}

/// `--render JSON`: read a results file (exit 2 if it cannot), then [`write_outputs`].
pub fn render(path: &Path, opts: &Opts) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("{}: {e}", path.display());
        std::process::exit(2)
    });
    let report: Report = serde_json::from_str(&text).unwrap_or_else(|e| {
        eprintln!("{}: {e}", path.display());
        std::process::exit(2)
    });
    write_outputs(opts, &report);
}

/// The tables on stdout; `--svg` and `--markdown` files (the notes and extras of every
/// row after the tables).
pub fn write_outputs(opts: &Opts, report: &Report) {
    let table = report.table();
    let targets = report.targets_table();
    println!("\n{table}\n{targets}");
    if let Some(path) = &opts.svg {
        if let Err(e) = std::fs::write(path, report.svg()) {
            eprintln!("writing {}: {e}", path.display());
        }
    }
    if let Some(path) = &opts.markdown {
        let mut notes = String::new();
        for row in &report.rows {
            for note in &row.notes {
                notes.push_str(&format!("* `{}`: {note}\n", row.id));
            }
            for (engine, o) in &row.engines {
                if let Outcome::Ok { extra, note, .. } = o {
                    if let Some(note) = note {
                        notes.push_str(&format!("* `{}` / {engine}: {note}\n", row.id));
                    }
                    if !extra.is_empty() {
                        let list: Vec<String> =
                            extra.iter().map(|(k, v)| format!("{k} = {v:.1}")).collect();
                        notes.push_str(&format!(
                            "* `{}` / {engine}: {}\n",
                            row.id,
                            list.join(", ")
                        ));
                    }
                }
            }
        }
        let text = format!("{table}\n{targets}\n{notes}");
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("writing {}: {e}", path.display());
        }
    }
}
