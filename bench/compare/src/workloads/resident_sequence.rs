//! `resident_sequence_100`: 100 dependent `x[i] += 1` steps on a 4096-word resident
//! buffer, one read range, one sync; reported per step. Floor: a CUDA graph of the 100
//! launches.

use crate::check::Expect;
use crate::engines::floor::driver::{DevBuf, Pinned};
use crate::harness::{Ctx, Sink};
use crate::measure::{measure, timed, Sampling, R};
use crate::programs::{self, Rng};
use crate::report::{Outcome, Row, Stats};
use std::collections::BTreeMap;
use vyre_driver::backend::{ResidentDispatchStep, ResidentReadRange};
use vyre_driver::VyreBackend;
use vyre_foundation::ir::Program;

/// The sequence: `steps` steps of `program` over `x0`, and what `x` must be after.
struct Sequence<'a> {
    program: &'a Program,
    x0: &'a [u8],
    steps: usize,
    expect: &'a Expect,
}

pub fn run(ctx: &Ctx, sink: &mut Sink) {
    let n = 4096usize;
    let steps = 100usize;
    let program = programs::step(n as u32);
    let x0 = Rng::new(99).u32_bytes(n);
    let want = match reference_steps(&program, &x0, steps) {
        Ok(want) => want,
        Err(line) => return sink.log(line),
    };
    let expect = Expect::Full(vec![want]);
    let seq = Sequence {
        program: &program,
        x0: &x0,
        steps,
        expect: &expect,
    };
    let sampling = ctx.sampling(5, ctx.samples(100));
    let per_step = |mut s: Stats| {
        s.median_ns /= steps as f64;
        s.p10_ns /= steps as f64;
        s.p90_ns /= steps as f64;
        s
    };
    let mut row = Row::new(
        "resident_sequence_100",
        "wall per step (100 steps of 4096 u32, 1 readback, 1 sync) / 100",
        None,
    );
    let floor = floor(ctx, &seq, sampling).map(|o| match o {
        Outcome::Ok { stats, extra, note } => Outcome::Ok {
            stats: per_step(stats),
            extra,
            note,
        },
        other => other,
    });
    row.insert_floor(floor);
    for engine in ctx.engines.vyre() {
        let o = match engine.backend() {
            Some(backend) => on_backend(backend, &seq, sampling)
                .map(|o| match o {
                    Outcome::Ok { stats, extra, note } => Outcome::Ok {
                        stats: per_step(stats),
                        extra,
                        note,
                    },
                    other => other,
                })
                .unwrap_or_else(|e| e),
            None => Outcome::Unsupported {
                reason: "engine not available".into(),
            },
        };
        row.engines.insert(engine.name().into(), o);
    }
    row.notes.push("backends: VyreBackend::dispatch_resident_sequence_read_ranges_into with 100 steps and one read range; extra.repeated_api_per_step_ns: dispatch_resident_repeated_sequence_read_ranges_into (1 step x 100)".into());
    sink.push(row);
}

/// vyre-reference run step by step; Err: the line to log.
fn reference_steps(program: &Program, x0: &[u8], steps: usize) -> Result<Vec<u8>, String> {
    let mut want = x0.to_vec();
    for _ in 0..steps {
        match programs::reference(program, &[want.as_slice()]) {
            Ok(mut out) if out.len() == 1 => want = out.remove(0),
            Ok(out) => {
                return Err(format!(
                    "sequence: reference returned {} outputs",
                    out.len()
                ))
            }
            Err(e) => return Err(format!("sequence: reference failed: {e}")),
        }
    }
    Ok(want)
}

/// The floor's CUDA graph of the steps, replayed with a pinned readback (whole-sequence
/// times); extra: the steps as plain launches.
fn floor(ctx: &Ctx, seq: &Sequence<'_>, s: Sampling) -> R<Outcome> {
    let floor = ctx.engines.floor.device()?;
    let (n, steps) = (seq.x0.len() / 4, seq.steps);
    let x = DevBuf::new(n * 4)?;
    let mut out = Pinned::new(n * 4)?;
    floor.upload(&x, seq.x0)?;
    let graph = floor.capture_sequence(&x, n as u32, steps)?;
    floor.replay(&graph, &x, out.as_mut_slice())?;
    if let Err(why) = seq.expect.check_one(out.as_slice()) {
        return Ok(Outcome::Fail { reason: why });
    }
    let stats = measure(s.warmup, s.samples, s.budget, || {
        timed(|| floor.replay(&graph, &x, out.as_mut_slice()))
    })?;
    let plain = measure(s.warmup, s.samples, s.budget, || {
        timed(|| floor.sequence(&x, n as u32, steps, out.as_mut_slice()))
    })?;
    let mut extra = BTreeMap::new();
    extra.insert(
        "plain_launches_per_step_ns".into(),
        plain.median_ns / steps as f64,
    );
    Ok(Outcome::Ok {
        stats,
        extra,
        note: Some("CUDA graph of 100 launches replayed, pinned readback; extra: 100 plain launches instead".into()),
    })
}

/// The sequence through the `VyreBackend` resident API (whole-sequence times).
fn on_backend(
    backend: &dyn VyreBackend,
    seq: &Sequence<'_>,
    s: Sampling,
) -> Result<Outcome, Outcome> {
    let unsupported = |e: vyre_driver::BackendError| Outcome::Unsupported {
        reason: e.to_string(),
    };
    let x = backend
        .allocate_resident(seq.x0.len())
        .map_err(unsupported)?;
    let result = (|| -> Result<Outcome, Outcome> {
        backend.upload_resident(&x, seq.x0).map_err(unsupported)?;
        let resources = [x.clone()];
        let list: Vec<ResidentDispatchStep<'_>> = (0..seq.steps)
            .map(|_| ResidentDispatchStep {
                program: seq.program,
                resources: &resources,
                grid_override: None,
                workgroup_override: None,
            })
            .collect();
        let ranges = [ResidentReadRange {
            resource: &x,
            byte_offset: 0,
            byte_len: seq.x0.len(),
        }];
        let mut out = Vec::new();
        backend
            .dispatch_resident_sequence_read_ranges_into(&list, &ranges, &mut [&mut out])
            .map_err(unsupported)?;
        if let Err(why) = seq.expect.check_one(&out) {
            return Err(Outcome::Fail { reason: why });
        }
        let stats = measure(s.warmup, s.samples, s.budget, || {
            timed(|| {
                backend
                    .dispatch_resident_sequence_read_ranges_into(&list, &ranges, &mut [&mut out])
                    .map_err(|e| e.to_string())
            })
        })
        .map_err(|e| Outcome::Fail {
            reason: format!("error while timing: {e}"),
        })?;
        let mut extra = BTreeMap::new();
        let note = match repeated(backend, seq, &list[..1], &ranges, &mut out, s) {
            Ok(ns) => {
                extra.insert("repeated_api_per_step_ns".into(), ns);
                None
            }
            Err(e) => Some(format!("repeated-sequence API: {e}")),
        };
        Ok(Outcome::Ok { stats, extra, note })
    })();
    let _ = backend.free_resident(x);
    result
}

/// The repeated-sequence API (1 step x `steps`), informational, checked too: ns per step.
fn repeated(
    backend: &dyn VyreBackend,
    seq: &Sequence<'_>,
    one: &[ResidentDispatchStep<'_>],
    ranges: &[ResidentReadRange<'_>],
    out: &mut Vec<u8>,
    s: Sampling,
) -> R<f64> {
    let x = ranges[0].resource;
    let steps = seq.steps as u32;
    backend
        .upload_resident(x, seq.x0)
        .map_err(|e| e.to_string())?;
    backend
        .dispatch_resident_repeated_sequence_read_ranges_into(
            &[],
            one,
            steps,
            ranges,
            &mut [&mut *out],
        )
        .map_err(|e| e.to_string())?;
    seq.expect.check_one(out)?;
    let timed_ns = measure(s.warmup, s.samples, s.budget, || {
        timed(|| {
            backend
                .dispatch_resident_repeated_sequence_read_ranges_into(
                    &[],
                    one,
                    steps,
                    ranges,
                    &mut [&mut *out],
                )
                .map_err(|e| e.to_string())
        })
    })?;
    Ok(timed_ns.median_ns / seq.steps as f64)
}
