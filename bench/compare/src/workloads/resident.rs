//! `resident_vadd_2^k`: kernel time over resident buffers (floor: device events around its
//! launch; backends: `dispatch_resident_timed().device_ns`).

use crate::check::{expect_elementwise, Expect};
use crate::engines::floor::driver::{DevBuf, Kernel};
use crate::harness::{Ctx, Sink};
use crate::measure::{measure, E2e, Sampling, R};
use crate::programs::{self, Rng, SALT};
use crate::report::{Outcome, Row};
use std::collections::BTreeMap;
use std::time::Duration;
use vyre_driver::{DispatchConfig, VyreBackend};

pub fn run(ctx: &Ctx, sink: &mut Sink, id: &str, n: usize) {
    let mut rng = Rng::new(n as u64 ^ 0x7e5);
    let (a, b) = (rng.u32_bytes(n), rng.u32_bytes(n));
    let make = |m: u32| programs::vadd(m, SALT);
    let program = make(n as u32);
    let inputs = [a.as_slice(), b.as_slice()];
    let expect = match expect_elementwise(&make, n, &inputs) {
        Ok(x) => x,
        Err(e) => return sink.log(format!("{id}: reference failed: {e}")),
    };
    let sampling = ctx.sampling(5, ctx.samples(50));
    let mut row = Row::new(
        id,
        "kernel time (device events), resident buffers",
        Some((n * 12) as f64),
    );
    let floor = floor(ctx, &a, &b, &expect, sampling);
    row.insert_floor(floor);
    let job = E2e {
        program: &program,
        inputs: &inputs,
        expect: &expect,
    };
    for engine in ctx.engines.vyre() {
        let o = match engine.backend() {
            Some(backend) => kernel_time(backend, &job, sampling),
            None => Outcome::Unsupported {
                reason: "engine not available".into(),
            },
        };
        row.engines.insert(engine.name().into(), o);
    }
    row.notes.push(expect.describe());
    row.notes.push("backends: VyreBackend::dispatch_resident_timed device_ns (falls back to wall_ns, flagged, when a backend reports no device time)".into());
    sink.push(row);
}

/// The floor's vadd kernel between device events, inputs uploaded once.
fn floor(ctx: &Ctx, a: &[u8], b: &[u8], expect: &Expect, s: Sampling) -> R<Outcome> {
    let floor = ctx.engines.floor.device()?;
    let n = a.len() / 4;
    let dev = [
        DevBuf::new(n * 4)?,
        DevBuf::new(n * 4)?,
        DevBuf::new(n * 4)?,
    ];
    floor.upload(&dev[0], a)?;
    floor.upload(&dev[1], b)?;
    floor.elementwise_kernel_time(Kernel::Vadd, &dev, n as u32)?;
    let mut out = vec![0u8; n * 4];
    floor.download(&mut out, &dev[2])?;
    if let Err(why) = expect.check_one(&out) {
        return Ok(Outcome::Fail { reason: why });
    }
    Ok(Outcome::ok(measure(s.warmup, s.samples, s.budget, || {
        floor.elementwise_kernel_time(Kernel::Vadd, &dev, n as u32)
    })?))
}

/// Resident vadd kernel time through the `VyreBackend` resident API: two input buffers
/// uploaded once, one output, checked after the first dispatch.
fn kernel_time(backend: &dyn VyreBackend, job: &E2e<'_>, s: Sampling) -> Outcome {
    let mut handles = Vec::new();
    let result = (|| -> Result<Outcome, Outcome> {
        let unsupported = |e: vyre_driver::BackendError| Outcome::Unsupported {
            reason: e.to_string(),
        };
        let bytes = job.inputs[0].len();
        for _ in 0..3 {
            handles.push(backend.allocate_resident(bytes).map_err(unsupported)?);
        }
        for (handle, input) in handles.iter().zip(job.inputs) {
            backend
                .upload_resident(handle, input)
                .map_err(unsupported)?;
        }
        let config = DispatchConfig::default();
        let first = backend
            .dispatch_resident_timed(job.program, &handles, &config)
            .map_err(unsupported)?;
        let out = backend
            .download_resident(&handles[2])
            .map_err(unsupported)?;
        if let Err(why) = job.expect.check_one(&out) {
            return Err(Outcome::Fail {
                reason: format!("resident output: {why}"),
            });
        }
        let device_time = first.device_ns.is_some();
        let stats = measure(s.warmup, s.samples, s.budget, || {
            let t = backend
                .dispatch_resident_timed(job.program, &handles, &config)
                .map_err(|e| e.to_string())?;
            Ok(Duration::from_nanos(t.device_ns.unwrap_or(t.wall_ns)))
        })
        .map_err(|e| Outcome::Fail {
            reason: format!("error while timing: {e}"),
        })?;
        let mut extra = BTreeMap::new();
        extra.insert("wall_ns_first".into(), first.wall_ns as f64);
        extra.insert(
            "outputs_returned_bytes".into(),
            first.outputs.iter().map(Vec::len).sum::<usize>() as f64,
        );
        Ok(Outcome::Ok {
            stats,
            extra,
            note: (!device_time).then(|| "no device_ns reported: WALL time shown".to_string()),
        })
    })();
    for h in handles {
        let _ = backend.free_resident(h);
    }
    result.unwrap_or_else(|o| o)
}
