//! Side-by-side benchmark of three engines on one GPU, in one process:
//!
//! * **floor**: the CUDA driver API called directly with hand-written PTX and pinned memory;
//! * **incumbent**: the published `vyre-driver-cuda 0.7.2`, through its `VyreBackend`;
//! * **vyre-cuda**: this repository's `CudaBackend`.
//!
//! Every workload first checks each engine's output against vyre-reference (non-zero random
//! data); a wrong engine is marked FAIL and left out of the ratios, an engine that cannot run
//! a workload is reported as unsupported. Run `cargo run --release -- --help`.
//!
//! `engines/` holds one module per engine behind the `Engine` trait, `workloads/` one module
//! per workload family (their order in `workloads::list`), `report` the results and their
//! tables, JSON and chart.

mod check;
mod cli;
mod cpu;
mod engines;
mod harness;
mod measure;
mod output;
mod programs;
mod ptxas_time;
mod report;
mod workloads;

use engines::Engines;
use harness::{Ctx, Sink};
use report::Report;
use std::time::Instant;

fn main() {
    let opts = cli::parse_opts();
    if let Some(dir) = &opts.dump_ptx {
        return output::dump_ptx(dir);
    }
    if let Some(args) = &opts.ptxas_time {
        return ptxas_time::run(args);
    }
    if let Some(path) = &opts.render {
        return output::render(path, &opts);
    }
    // The incumbent's autotuner may rewrite 1-D workgroups; keep shapes fixed (contract §5.4).
    if std::env::var_os("VYRE_AUTOTUNER").is_none() {
        std::env::set_var("VYRE_AUTOTUNER", "off");
    }
    if let Some(part) = &opts.artifact_child {
        let (Some(engine), Some(out)) = (&opts.engine, &opts.child_out) else {
            eprintln!(
                "--artifact-child needs --engine and --child-out\n{}",
                cli::USAGE
            );
            std::process::exit(2)
        };
        return workloads::artifact::child_main(part, engine, out, opts.quick);
    }
    let started = Instant::now();
    let mut report = new_report();
    let mut log = Vec::new();
    let engines = if workloads::artifact::only(opts.only.as_deref()) {
        log.push("only artifact workloads: this process opens no engine (each runs in processes of its own)".into());
        Engines::unopened()
    } else {
        Engines::open(&opts, &mut log)
    };
    report.device = engines.floor.facts().cloned();
    for var in [
        "CUDA_CACHE_DISABLE",
        "CUDA_CACHE_PATH",
        "CUDA_CACHE_MAXSIZE",
    ] {
        if let Ok(v) = std::env::var(var) {
            report
                .environment
                .insert(format!("{var} (after the engines opened)"), v);
        }
    }
    let mut sink = Sink::new(report, opts.json.clone());
    let ctx = Ctx::new(opts, engines);
    for line in log {
        sink.log(line);
    }
    workloads::run_all(&ctx, &mut sink, started);
    sink.save();
    output::write_outputs(&ctx.opts, &sink.report);
    ctx.engines.close();
}

/// The report's header: date, command line, the environment that steers the engines.
fn new_report() -> Report {
    let mut report = Report {
        date: std::process::Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%d %H:%M UTC")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        incumbent: engines::incumbent::INCUMBENT.into(),
        ..Report::default()
    };
    for var in [
        "VYRE_AUTOTUNER",
        "CUDA_CACHE_DISABLE",
        "CUDA_CACHE_PATH",
        "CUDA_CACHE_MAXSIZE",
        "VYRE_CUDA_DEVICE",
    ] {
        if let Ok(v) = std::env::var(var) {
            report.environment.insert(var.into(), v);
        }
    }
    report
}
