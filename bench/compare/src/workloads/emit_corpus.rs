//! `emit_ptx_corpus`: PTX generation time per corpus program (host CPU, no GPU needed).

use super::corpus::corpus;
use crate::harness::{Ctx, Sink};
use crate::report::{Outcome, Row, Stats};
use std::collections::BTreeMap;
use std::time::Instant;
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::Program;

pub fn run(ctx: &Ctx, sink: &mut Sink) {
    let programs: Vec<Program> = corpus().iter().map(|f| (f.build)()).collect();
    let mut row = Row::new(
        "emit_ptx_corpus",
        "PTX generation per corpus program (host CPU; median over programs)",
        None,
    );
    let mut emitters = Vec::new();
    for engine in ctx.engines.all() {
        let outcome = match engine.emitter() {
            Err(reason) => Outcome::Unsupported { reason },
            Ok(emitter) => {
                emitters.push(format!("{}: {emitter}", engine.name()));
                if let Some(needs) = engine.config_needs() {
                    emitters.push(format!("{}: {needs}", engine.name()));
                }
                // What its users must pass for each program, made before any timing.
                let jobs: Vec<(&Program, DispatchConfig)> = programs
                    .iter()
                    .map(|p| (p, engine.config_for(p, &ctx.config)))
                    .collect();
                let (mut times, rejected) =
                    per_program(&jobs, &|p, config| engine.emit_ptx(p, config).is_ok());
                let mut extra = BTreeMap::new();
                extra.insert("programs_emitted".into(), times.len() as f64);
                extra.insert("programs_rejected".into(), rejected as f64);
                Outcome::Ok {
                    stats: Stats::from_ns(&mut times),
                    extra,
                    note: None,
                }
            }
        };
        row.engines.insert(engine.name().into(), outcome);
    }
    row.notes.push(format!(
        "{} programs (vyre-primitives + vyre-libs); each program's time is the median of 5 runs; {}",
        programs.len(),
        emitters.join("; ")
    ));
    sink.push(row);
}

/// Each emitted program's median of 5 runs of `emit`, and how many programs it rejected.
fn per_program(
    jobs: &[(&Program, DispatchConfig)],
    emit: &dyn Fn(&Program, &DispatchConfig) -> bool,
) -> (Vec<f64>, usize) {
    let mut times = Vec::new();
    let mut rejected = 0;
    for (p, config) in jobs {
        let mut runs = Vec::new();
        let mut ok = true;
        for _ in 0..5 {
            let started = Instant::now();
            ok = emit(p, config);
            runs.push(started.elapsed().as_secs_f64() * 1e9);
        }
        if ok {
            runs.sort_by(f64::total_cmp);
            times.push(runs[2]);
        } else {
            rejected += 1;
        }
    }
    (times, rejected)
}
