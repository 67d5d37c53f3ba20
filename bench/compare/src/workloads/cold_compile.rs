//! `cold_compile`: first dispatch of a program no cache has seen (a 1024-element vadd with
//! a fresh literal per sample, engine and run). Floor: `cuModuleLoadData` of a one-kernel
//! scalar PTX + launch + pinned copies.

use crate::check::Expect;
use crate::engines::floor::driver::{DevBuf, Floor, Pinned};
use crate::engines::floor::ptx;
use crate::engines::Engine;
use crate::harness::{Ctx, Sink};
use crate::measure::{timed, R};
use crate::programs::{self, Rng};
use crate::report::{Outcome, Row, Stats};
use std::collections::BTreeMap;

const N: usize = 1024;

/// The inputs, and the literals: they differ between engines, samples and runs.
struct Cold {
    a: Vec<u8>,
    b: Vec<u8>,
    run_salt: u32,
    samples: usize,
}

impl Cold {
    /// The literal of `engine`'s sample `k`.
    fn salt(&self, engine: u32, k: usize) -> u32 {
        0x4000_0000u32 ^ self.run_salt.wrapping_add(engine * 10_000 + k as u32 + 11)
    }

    fn expect_for(&self, salt: u32) -> R<Expect> {
        let inputs = [self.a.as_slice(), self.b.as_slice()];
        Ok(Expect::Full(programs::reference(
            &programs::vadd(N as u32, salt),
            &inputs,
        )?))
    }
}

pub fn run(ctx: &Ctx, sink: &mut Sink) {
    let samples = ctx.samples(30);
    let mut rng = Rng::new(3);
    let (a, b) = (rng.u32_bytes(N), rng.u32_bytes(N));
    let run_salt = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        % 1_000_000) as u32
        * 64;
    let cold = Cold {
        a,
        b,
        run_salt,
        samples,
    };
    let mut row = Row::new(
        "cold_compile",
        "first dispatch of a new program (1024 elements), end to end",
        None,
    );
    let floor = floor(ctx, &cold);
    row.insert_floor(floor);
    for (ei, engine) in (1u32..).zip(ctx.engines.vyre()) {
        let o = on_engine(ctx, engine, ei, &cold);
        row.engines.insert(engine.name().into(), o);
    }
    row.notes.push("each sample is a distinct program (fresh u32 literal); every output checked in full against vyre-reference".into());
    sink.push(row);
}

/// The floor: a fresh hand-written module per sample, loaded, launched, read back.
fn floor(ctx: &Ctx, cold: &Cold) -> R<Outcome> {
    let floor = ctx.engines.floor.device()?;
    let (major, minor) = floor.facts.compute_capability;
    let dev = DevBuf::new(Floor::tiny_bytes(N))?;
    let mut ab = Pinned::new(8 * N)?;
    ab.as_mut_slice()[..4 * N].copy_from_slice(&cold.a);
    ab.as_mut_slice()[4 * N..].copy_from_slice(&cold.b);
    let mut out = Pinned::new(4 * N)?;
    let mut taken = Vec::new();
    for k in 0..cold.samples {
        let s = cold.salt(0, k);
        let text = ptx::cold_module(major, minor, s);
        taken.push(floor.cold_vadd(&text, ab.as_slice(), out.as_mut_slice(), &dev)?);
        if let Err(why) = cold.expect_for(s)?.check_one(out.as_slice()) {
            return Ok(Outcome::Fail { reason: why });
        }
    }
    Ok(Outcome::Ok {
        stats: Stats::from_durations(&taken),
        extra: BTreeMap::new(),
        note: Some(
            "cuModuleLoadData of a 1-kernel hand-written PTX + launch + pinned copies".into(),
        ),
    })
}

/// An engine (number `ei` in the salts) on a distinct program per sample, each checked.
fn on_engine(ctx: &Ctx, engine: &dyn Engine, ei: u32, cold: &Cold) -> Outcome {
    let inputs = [cold.a.as_slice(), cold.b.as_slice()];
    let mut taken = Vec::new();
    let mut out = Vec::new();
    for k in 0..cold.samples {
        let s = cold.salt(ei, k);
        let program = programs::vadd(N as u32, s);
        match timed(|| engine.dispatch(&program, &inputs, &ctx.config, &mut out)) {
            Ok(t) => taken.push(t),
            Err(err) if k == 0 => return Outcome::Unsupported { reason: err },
            Err(err) => {
                return Outcome::Fail {
                    reason: format!("sample {k}: {err}"),
                }
            }
        }
        match cold.expect_for(s) {
            Ok(x) => {
                if let Err(why) = x.check(&out) {
                    return Outcome::Fail { reason: why };
                }
            }
            Err(err) => {
                return Outcome::Unsupported {
                    reason: format!("reference: {err}"),
                }
            }
        }
    }
    Outcome::ok(Stats::from_durations(&taken))
}
