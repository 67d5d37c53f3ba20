//! `vadd_u32_2^k`, `saxpy_f32_2^24` and `saxpy_user_f32_2^k`: borrowed pageable inputs,
//! end to end. The floor runs its pinned-memory pipeline (4 MiB chunks over 4 streams).

use super::staging_sweep;
use crate::check::{expect_elementwise, Expect};
use crate::engines::floor::driver::{DevBuf, Kernel, Pinned};
use crate::harness::{Ctx, Sink};
use crate::measure::{measure, timed, E2e, Sampling, R};
use crate::programs::{self, Rng, SALT};
use crate::report::{Outcome, Row};
use std::collections::BTreeMap;
use vyre_foundation::ir::Program;

/// The elementwise workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Vadd,
    /// `out = ALPHA * x + y`, the scale a literal.
    Saxpy,
    /// saxpy as users write it: `y = alpha[0] * x + y`, the scale in a one-element buffer
    /// (`ALPHA`), `y` in place. The floor runs its saxpy kernel (scale a literal) into a
    /// separate output: the same bytes each way.
    SaxpyUser,
    /// `y = clamp(p[0] * x + p[1] * y, p[2], p[3])`, the four parameters in a buffer
    /// ([`programs::PARAMS`]), `y` in place; the floor as for `SaxpyUser`.
    ParamsUser,
}

impl Shape {
    fn floor_kernel(self) -> Kernel {
        match self {
            Self::Vadd => Kernel::Vadd,
            Self::Saxpy | Self::SaxpyUser | Self::ParamsUser => Kernel::Saxpy,
        }
    }

    fn program(self, n: u32) -> Program {
        match self {
            Self::Vadd => programs::vadd(n, SALT),
            Self::Saxpy => programs::saxpy(n),
            Self::SaxpyUser => programs::saxpy_user(n),
            Self::ParamsUser => programs::params_user(n),
        }
    }
}

pub fn run(ctx: &Ctx, sink: &mut Sink, id: &str, shape: Shape, n: usize) {
    let mut rng = Rng::new(n as u64 ^ 0x5eed);
    let (a, b) = match shape {
        Shape::Vadd => (rng.u32_bytes(n), rng.u32_bytes(n)),
        Shape::Saxpy | Shape::SaxpyUser | Shape::ParamsUser => (rng.f32_bytes(n), rng.f32_bytes(n)),
    };
    let kernel = shape.floor_kernel();
    let make = |m: u32| shape.program(m);
    let program = make(n as u32);
    let alpha = programs::ALPHA.to_le_bytes();
    let params: Vec<u8> = programs::PARAMS
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let inputs: Vec<&[u8]> = match shape {
        Shape::SaxpyUser => vec![&alpha, &a, &b],
        Shape::ParamsUser => vec![&params, &a, &b],
        Shape::Vadd | Shape::Saxpy => vec![&a, &b],
    };
    let inputs = inputs.as_slice();
    let expect = match expect_elementwise(&make, n, inputs) {
        Ok(x) => x,
        Err(e) => return sink.log(format!("{id}: reference failed: {e}")),
    };
    let samples = if n >= 1 << 24 {
        ctx.samples(30)
    } else {
        ctx.samples(100)
    };
    let warm = if n >= 1 << 24 { 3 } else { 10 };
    let mut row = Row::new(
        id,
        "end to end wall (pageable Vec inputs/outputs)",
        Some((n * 12) as f64),
    );
    let floor = floor(ctx, kernel, &a, &b, &expect, ctx.sampling(warm, samples));
    row.insert_floor(floor);
    let job = E2e {
        program: &program,
        inputs,
        expect: &expect,
    };
    ctx.e2e_each(&mut row, &job, warm, samples);
    // The chunked pipeline (inputs of 32 MiB and more) does not use the staging lanes.
    if n * 8 < 32 << 20 && n >= 1 << 16 {
        let sweep = staging_sweep::sweep(ctx, &job, samples.min(30));
        staging_sweep::attach(sink, &mut row, sweep);
    }
    if matches!(shape, Shape::SaxpyUser | Shape::ParamsUser) {
        row.notes
            .push("floor: its saxpy kernel (scale a literal, a separate output)".into());
    }
    row.notes.push(expect.describe());
    sink.push(row);
}

/// The floor's pinned pipeline, checked, then timed; extra: the same from pageable memory.
fn floor(
    ctx: &Ctx,
    kernel: Kernel,
    a: &[u8],
    b: &[u8],
    expect: &Expect,
    s: Sampling,
) -> R<Outcome> {
    let floor = ctx.engines.floor.device()?;
    let n = a.len() / 4;
    let dev = [
        DevBuf::new(n * 4)?,
        DevBuf::new(n * 4)?,
        DevBuf::new(n * 4)?,
    ];
    let mut pa = Pinned::new(n * 4)?;
    let mut pb = Pinned::new(n * 4)?;
    let mut pout = Pinned::new(n * 4)?;
    pa.as_mut_slice().copy_from_slice(a);
    pb.as_mut_slice().copy_from_slice(b);
    pout.as_mut_slice().fill(0xA5);
    let chunk = 1 << 20;
    floor.elementwise_e2e(
        kernel,
        pa.as_slice(),
        pb.as_slice(),
        pout.as_mut_slice(),
        &dev,
        chunk,
    )?;
    if let Err(why) = expect.check_one(pout.as_slice()) {
        return Ok(Outcome::Fail { reason: why });
    }
    let stats = measure(s.warmup, s.samples, s.budget, || {
        timed(|| {
            floor.elementwise_e2e(
                kernel,
                pa.as_slice(),
                pb.as_slice(),
                pout.as_mut_slice(),
                &dev,
                chunk,
            )
        })
    })?;
    // The same pipeline straight from the pageable Vecs (informational).
    let mut out = vec![0u8; n * 4];
    let pageable = measure(1, s.samples.min(10), s.budget, || {
        timed(|| floor.elementwise_e2e(kernel, a, b, &mut out, &dev, chunk))
    })?;
    let mut extra = BTreeMap::new();
    extra.insert("pageable_median_ns".into(), pageable.median_ns);
    Ok(Outcome::Ok {
        stats,
        extra,
        note: Some("pinned inputs/outputs, 4 MiB chunks over 4 streams (copies overlap kernels); extra.pageable_median_ns: the same from the pageable Vecs".into()),
    })
}
