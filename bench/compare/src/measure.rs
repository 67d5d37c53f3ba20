//! Timing: warm-up and sampling under a budget, and the check-then-time of one end-to-end
//! borrowed dispatch through a vyre backend.

use crate::check::Expect;
use crate::report::{Outcome, Stats};
use std::time::{Duration, Instant};
use vyre_driver::{DispatchConfig, VyreBackend};
use vyre_foundation::ir::Program;

pub type R<T> = Result<T, String>;

/// Warm up, then time `f` until `samples` samples (or the budget, keeping at least 10).
pub fn measure(
    warmup: usize,
    samples: usize,
    budget: Duration,
    mut f: impl FnMut() -> R<Duration>,
) -> R<Stats> {
    let started = Instant::now();
    for _ in 0..warmup {
        f()?;
        if started.elapsed() > budget / 4 {
            break;
        }
    }
    let mut taken = Vec::with_capacity(samples);
    let started = Instant::now();
    while taken.len() < samples {
        taken.push(f()?);
        if started.elapsed() > budget && taken.len() >= 10 {
            break;
        }
    }
    Ok(Stats::from_durations(&taken))
}

pub fn timed(f: impl FnOnce() -> R<()>) -> R<Duration> {
    let started = Instant::now();
    f()?;
    Ok(started.elapsed())
}

/// One end-to-end workload: a program, its borrowed inputs, what its outputs must be.
pub struct E2e<'a> {
    pub program: &'a Program,
    pub inputs: &'a [&'a [u8]],
    pub expect: &'a Expect,
}

/// Warm-up runs, samples and the time budget of one timed loop (see [`measure`]).
#[derive(Clone, Copy)]
pub struct Sampling {
    pub warmup: usize,
    pub samples: usize,
    pub budget: Duration,
}

/// Check, then time, `backend` on an end-to-end borrowed dispatch.
pub fn e2e_on(
    backend: &dyn VyreBackend,
    job: &E2e<'_>,
    config: &DispatchConfig,
    sampling: Sampling,
) -> Outcome {
    let mut out = Vec::new();
    let dispatch = |out: &mut Vec<Vec<u8>>| {
        backend
            .dispatch_borrowed_into(job.program, job.inputs, config, out)
            .map_err(|err| err.to_string())
    };
    if let Err(err) = dispatch(&mut out) {
        return Outcome::Unsupported { reason: err };
    }
    if let Err(why) = job.expect.check(&out) {
        return Outcome::Fail { reason: why };
    }
    let Sampling {
        warmup,
        samples,
        budget,
    } = sampling;
    match measure(warmup, samples, budget, || timed(|| dispatch(&mut out))) {
        Ok(stats) => Outcome::ok(stats),
        Err(err) => Outcome::Fail {
            reason: format!("error while timing: {err}"),
        },
    }
}
