//! `emit_ptx_corpus`: PTX generation time per corpus program (host CPU, no GPU needed).

use super::corpus::corpus;
use crate::harness::{Ctx, Sink};
use crate::report::{Outcome, Row, Stats};
use std::collections::BTreeMap;
use std::time::Instant;
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
                let (mut times, rejected) =
                    per_program(&programs, &|p| engine.emit_ptx(p, &ctx.config).is_ok());
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
        "{} programs (vyre-primitives + vyre-intrinsics); each program's time is the median of 5 runs; {}",
        programs.len(),
        emitters.join("; ")
    ));
    sink.push(row);
}

/// Each emitted program's median of 5 runs of `emit`, and how many programs it rejected.
fn per_program(programs: &[Program], emit: &dyn Fn(&Program) -> bool) -> (Vec<f64>, usize) {
    let mut times = Vec::new();
    let mut rejected = 0;
    for p in programs {
        let mut runs = Vec::new();
        let mut ok = true;
        for _ in 0..5 {
            let started = Instant::now();
            ok = emit(p);
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
