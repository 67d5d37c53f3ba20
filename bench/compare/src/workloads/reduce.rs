//! `reduce_atomic_2^24`: 2^24 u32 summed into one slot with `Expr::Atomic` Add (one atomic
//! per element), end to end. The floor: a shuffle + shared-memory block reduction.

use super::staging_sweep;
use crate::check::Expect;
use crate::engines::floor::driver::{DevBuf, Pinned};
use crate::harness::{Ctx, Sink};
use crate::measure::{measure, timed, E2e, Sampling, R};
use crate::programs::{self, Rng};
use crate::report::{Outcome, Row};
use std::collections::BTreeMap;
use std::time::Instant;

pub fn run(ctx: &Ctx, sink: &mut Sink) {
    let n = if ctx.opts.quick {
        1usize << 20
    } else {
        1usize << 24
    };
    let id = "reduce_atomic_2^24";
    let program = programs::reduce_atomic(n as u32);
    let a = Rng::new(24).u32_bytes(n);
    let inputs = [a.as_slice()];
    let started = Instant::now();
    let expect = match programs::reference(&program, &inputs) {
        Ok(w) => Expect::Full(w),
        Err(e) => return sink.log(format!("{id}: reference failed: {e}")),
    };
    sink.log(format!(
        "{id}: vyre-reference took {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let (warm, samples) = (3, ctx.samples(30));
    let mut row = Row::new(
        id,
        "end to end wall (pageable Vec input)",
        Some((n * 4) as f64),
    );
    let floor = floor(ctx, &a, &expect, ctx.sampling(warm, samples));
    row.insert_floor(floor);
    let job = E2e {
        program: &program,
        inputs: &inputs,
        expect: &expect,
    };
    ctx.e2e_each(&mut row, &job, warm, samples);
    let sweep = staging_sweep::sweep(ctx, &job, samples);
    staging_sweep::attach(sink, &mut row, sweep);
    row.notes.push(format!(
        "n = {n}; checked in full against vyre-reference (one atomic per element in the reference)"
    ));
    sink.push(row);
}

/// The floor's pinned, chunked reduction, checked, then timed.
fn floor(ctx: &Ctx, a: &[u8], expect: &Expect, s: Sampling) -> R<Outcome> {
    let floor = ctx.engines.floor.device()?;
    let n = a.len() / 4;
    let dev_a = DevBuf::new(n * 4)?;
    let dev_out = DevBuf::new(256)?;
    let mut pa = Pinned::new(n * 4)?;
    pa.as_mut_slice().copy_from_slice(a);
    let mut out = Pinned::new(4)?;
    let chunk = 1 << 20;
    floor.reduce_e2e(pa.as_slice(), out.as_mut_slice(), &dev_a, &dev_out, chunk)?;
    if let Err(why) = expect.check_one(out.as_slice()) {
        return Ok(Outcome::Fail { reason: why });
    }
    let stats = measure(s.warmup, s.samples, s.budget, || {
        timed(|| floor.reduce_e2e(pa.as_slice(), out.as_mut_slice(), &dev_a, &dev_out, chunk))
    })?;
    Ok(Outcome::Ok {
        stats,
        extra: BTreeMap::new(),
        note: Some("pinned input, 4 MiB chunks over 4 streams, warp-shuffle + shared-memory block reduction, one atom.add per block".into()),
    })
}
