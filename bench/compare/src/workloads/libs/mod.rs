//! `libs_*`: real workloads built with vyre-libs 0.7.2 (`build`), two rows each:
//!
//! * `<id>_kernel`: kernel time over resident buffers (`dispatch_resident_timed().device_ns`,
//!   the backend's device events), with GB/s, GOP/s and the share of the device's roofline;
//! * `<id>_e2e`: end-to-end wall time of the ordinary borrowed dispatch.
//!
//! Each engine is first checked on the workload's small size, byte for byte against
//! vyre-reference, through the same path the row times (a resident dispatch for the kernel
//! row, a borrowed one for the end-to-end row); a mismatch makes that row FAIL. The rooflines
//! come once per run: the HBM rate from the floor's device-to-device copy (`libs_hbm_copy`)
//! and the FP32 peak from the SM count and clock.

pub mod build;
mod floor_kernels;

use crate::check::Expect;
use crate::engines::floor::driver::DevBuf;
use crate::engines::Engine;
use crate::harness::{Ctx, Sink};
use crate::measure::{measure, timed, Sampling, R};
use crate::programs;
use crate::report::{Outcome, Row};
use build::{Bound, Spec};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;
use vyre_driver::{DispatchConfig, Resource, VyreBackend};
use vyre_foundation::ir::Program;

/// The share of the HBM roofline a memory-bound kernel should reach (issue 18).
pub const HBM_TARGET: f64 = 0.7;

/// Bytes each way of the floor's roofline copy: far past every cache.
const COPY_BYTES: usize = 256 << 20;

/// The device's rooflines, measured once per run.
#[derive(Clone, Copy, Debug)]
struct Roofline {
    /// Bytes read plus bytes written per second by a device-to-device copy, in GB/s.
    hbm_gbps: Option<f64>,
    /// SMs x clock x 128 FP32 lanes x 2 (an FMA is two operations), in GFLOP/s.
    fp32_gflops: Option<f64>,
}

static ROOFLINE: OnceLock<Roofline> = OnceLock::new();

/// The rooflines, measured (and their row pushed) by the first workload that asks.
fn roofline(ctx: &Ctx, sink: &mut Sink) -> Roofline {
    *ROOFLINE.get_or_init(|| measure_roofline(ctx, sink))
}

/// `libs_hbm_copy`: the rooflines on their own (what every other `libs_` row uses).
pub fn hbm_copy(ctx: &Ctx, sink: &mut Sink) {
    roofline(ctx, sink);
}

fn measure_roofline(ctx: &Ctx, sink: &mut Sink) -> Roofline {
    let mut row = Row::new(
        "libs_hbm_copy",
        "device-to-device copy, 256 MiB (floor, device events): the HBM roofline",
        Some(2.0 * COPY_BYTES as f64),
    );
    let copy = copy_time(ctx, ctx.sampling(3, ctx.samples(30)));
    let hbm_gbps = copy
        .as_ref()
        .ok()
        .and_then(Outcome::median)
        .map(|ns| 2.0 * COPY_BYTES as f64 / ns);
    row.insert_floor(copy);
    row.notes
        .push("rate = bytes read + bytes written over the copy's median time".into());
    let fp32_gflops = ctx.engines.floor.facts().map(|f| {
        f64::from(f.multiprocessors) * f64::from(f.sm_clock_khz) * 1e3 * 128.0 * 2.0 / 1e9
    });
    sink.push(row);
    let mut values = BTreeMap::new();
    if let Some(v) = hbm_gbps {
        values.insert("hbm_gbps".into(), v);
    }
    if let Some(v) = fp32_gflops {
        values.insert("fp32_peak_gflops".into(), v);
    }
    sink.diagnostics("libs_roofline", values);
    Roofline {
        hbm_gbps,
        fp32_gflops,
    }
}

fn copy_time(ctx: &Ctx, s: Sampling) -> R<Outcome> {
    let floor = ctx.engines.floor.device()?;
    let (src, dst) = (DevBuf::new(COPY_BYTES)?, DevBuf::new(COPY_BYTES)?);
    let stats = measure(s.warmup, s.samples, s.budget, || {
        floor.copy_time(&dst, &src)
    })?;
    Ok(Outcome::ok(stats))
}

/// One size of a workload: its program, its reference inputs, what it moves and computes.
struct Job {
    program: Program,
    inputs: Vec<Vec<u8>>,
    bytes: f64,
    ops: Option<f64>,
}

impl Job {
    fn new(spec: &Spec, size: u32) -> R<Self> {
        let program = (spec.build)(size)?;
        let inputs = build::inputs(&program, (spec.data)(size))?;
        let bytes = build::moved_bytes(&program)?;
        Ok(Self {
            program,
            inputs,
            bytes,
            ops: spec.ops.map(|f| f(size)),
        })
    }

    fn borrowed(&self) -> Vec<&[u8]> {
        self.inputs.iter().map(Vec::as_slice).collect()
    }
}

/// Run one workload: check every engine on the small size, time it on the large one.
pub fn run(ctx: &Ctx, sink: &mut Sink, spec: &Spec) {
    let roof = roofline(ctx, sink);
    let (small, large) = match (Job::new(spec, spec.small), Job::new(spec, spec.large)) {
        (Ok(s), Ok(l)) => (s, l),
        (Err(e), _) | (_, Err(e)) => return sink.log(format!("{}: build failed: {e}", spec.id)),
    };
    let expect = match programs::reference(&small.program, &small.borrowed()) {
        Ok(want) => Expect::Full(want),
        Err(e) => return sink.log(format!("{}: reference failed: {e}", spec.id)),
    };
    let size = format!("{} {}", spec.large, spec.unit);
    let mut kernel = Row::new(
        &format!("{}_kernel", spec.id),
        &format!("kernel time (device events), resident buffers, {size}"),
        Some(large.bytes),
    );
    let mut e2e = Row::new(
        &format!("{}_e2e", spec.id),
        &format!("end to end wall (borrowed dispatch), {size}"),
        Some(large.bytes),
    );
    let s = ctx.sampling(3, ctx.samples(30));
    let no_floor =
        || Err("no hand-written floor kernel for this workload in this harness".to_string());
    match spec.floor {
        Some(kind) => {
            let floor = (ctx.engines.floor.device())
                .map(|f| floor_kernels::kernel_outcome(f, kind, (&small, &large), &expect, s));
            kernel.insert_floor(floor.map(|k| with_rates(k, &large, roof, spec.bound)));
            e2e.insert_floor(Err("the floor's row is its kernel time".to_string()));
        }
        None => {
            kernel.insert_floor(no_floor());
            e2e.insert_floor(no_floor());
        }
    }
    for engine in ctx.engines.vyre() {
        let (k, e) = match engine.backend() {
            Some(backend) => {
                let (k, e) = (
                    Case::new(ctx, engine, &small),
                    Case::new(ctx, engine, &large),
                );
                (
                    resident_outcome(backend, &k, &e, &expect, s),
                    e2e_outcome(backend, &k, &e, &expect, s),
                )
            }
            None => (unavailable(), unavailable()),
        };
        kernel.engines.insert(
            engine.name().into(),
            with_rates(k, &large, roof, spec.bound),
        );
        // End to end includes the host copies: its rates, but no roofline share.
        let host = Roofline {
            hbm_gbps: None,
            fp32_gflops: None,
        };
        e2e.engines.insert(
            engine.name().into(),
            with_rates(e, &large, host, spec.bound),
        );
    }
    for row in [&mut kernel, &mut e2e] {
        row.notes.push(format!("{}; timed at {size}", spec.call));
        row.notes.push(format!(
            "each engine checked in full against vyre-reference at {} {}, through the path this row times",
            spec.small, spec.unit
        ));
    }
    kernel.notes.push(
        "VyreBackend::dispatch_resident_timed device_ns (falls back to wall_ns, flagged, when a backend reports no device time)".into(),
    );
    sink.push(kernel);
    sink.push(e2e);
}

fn unavailable() -> Outcome {
    Outcome::Unsupported {
        reason: "engine not available".into(),
    }
}

/// A job with the `DispatchConfig` an engine's users must pass for it.
struct Case<'a> {
    job: &'a Job,
    config: DispatchConfig,
}

impl<'a> Case<'a> {
    fn new(ctx: &Ctx, engine: &dyn Engine, job: &'a Job) -> Self {
        Self {
            job,
            config: engine.config_for(&job.program, &ctx.config),
        }
    }
}

/// Check the borrowed dispatch on the small case, then time it on the large one.
fn e2e_outcome(
    backend: &dyn VyreBackend,
    small: &Case<'_>,
    large: &Case<'_>,
    expect: &Expect,
    s: Sampling,
) -> Outcome {
    let mut out = Vec::new();
    let dispatch = |case: &Case<'_>, out: &mut Vec<Vec<u8>>| {
        backend
            .dispatch_borrowed_into(&case.job.program, &case.job.borrowed(), &case.config, out)
            .map_err(|e| e.to_string())
    };
    if let Err(reason) = dispatch(small, &mut out) {
        return Outcome::Unsupported { reason };
    }
    if let Err(why) = expect.check(&out) {
        return Outcome::Fail { reason: why };
    }
    if let Err(reason) = dispatch(large, &mut out) {
        return Outcome::Unsupported { reason };
    }
    match measure(s.warmup, s.samples, s.budget, || {
        timed(|| dispatch(large, &mut out))
    }) {
        Ok(stats) => Outcome::ok(stats),
        Err(e) => Outcome::Fail {
            reason: format!("error while timing: {e}"),
        },
    }
}

/// Check a resident dispatch on the small case, then time resident dispatches of the
/// large one (device time).
fn resident_outcome(
    backend: &dyn VyreBackend,
    small: &Case<'_>,
    large: &Case<'_>,
    expect: &Expect,
    s: Sampling,
) -> Outcome {
    let unsupported = |e: String| Outcome::Unsupported { reason: e };
    let checked = Resident::new(backend, small.job)
        .and_then(|r| r.outputs_after_dispatch(small))
        .map_err(unsupported)
        .and_then(|out| {
            expect.check(&out).map_err(|why| Outcome::Fail {
                reason: format!("resident output: {why}"),
            })
        });
    if let Err(outcome) = checked {
        return outcome;
    }
    let resident = match Resident::new(backend, large.job) {
        Ok(r) => r,
        Err(e) => return unsupported(e),
    };
    let first = match resident.timed(large) {
        Ok(t) => t,
        Err(e) => return unsupported(e),
    };
    let stats = match measure(s.warmup, s.samples, s.budget, || {
        let t = resident.timed(large)?;
        Ok(Duration::from_nanos(t.device_ns.unwrap_or(t.wall_ns)))
    }) {
        Ok(stats) => stats,
        Err(e) => {
            return Outcome::Fail {
                reason: format!("error while timing: {e}"),
            }
        }
    };
    let mut extra = BTreeMap::new();
    extra.insert("wall_ns_first".into(), first.wall_ns as f64);
    Outcome::Ok {
        stats,
        extra,
        note: first
            .device_ns
            .is_none()
            .then(|| "no device_ns reported: WALL time shown".to_string()),
    }
}

/// A job's buffers resident on one backend: one resource per device buffer, in binding
/// order, inputs uploaded, outputs zeroed; freed on drop.
struct Resident<'a> {
    backend: &'a dyn VyreBackend,
    /// The device buffers' names and their resources, in binding order.
    names: Vec<String>,
    handles: Vec<Resource>,
}

impl<'a> Resident<'a> {
    fn new(backend: &'a dyn VyreBackend, job: &Job) -> R<Self> {
        let mut resident = Self {
            backend,
            names: Vec::new(),
            handles: Vec::new(),
        };
        let reference_inputs: Vec<&str> = (job.program.buffers().iter())
            .filter(|d| vyre_reference::is_reference_input(d))
            .map(|d| d.name())
            .collect();
        for decl in build::bindings(&job.program) {
            let bytes = build::declared_bytes(decl)?;
            let handle = backend
                .allocate_resident(bytes)
                .map_err(|e| e.to_string())?;
            resident.names.push(decl.name().to_string());
            resident.handles.push(handle);
            let zeros;
            let value = match reference_inputs.iter().position(|n| *n == decl.name()) {
                Some(k) => job.inputs[k].as_slice(),
                None => {
                    zeros = vec![0u8; bytes];
                    zeros.as_slice()
                }
            };
            backend
                .upload_resident(&resident.handles[resident.handles.len() - 1], value)
                .map_err(|e| e.to_string())?;
        }
        Ok(resident)
    }

    fn timed(&self, case: &Case<'_>) -> R<vyre_driver::TimedDispatchResult> {
        self.backend
            .dispatch_resident_timed(&case.job.program, &self.handles, &case.config)
            .map_err(|e| e.to_string())
    }

    /// One dispatch, then the buffers vyre-reference returns, in its order.
    fn outputs_after_dispatch(&self, case: &Case<'_>) -> R<Vec<Vec<u8>>> {
        self.timed(case)?;
        let mut out = Vec::new();
        for decl in case.job.program.buffers() {
            if !vyre_reference::is_reference_output(decl) {
                continue;
            }
            let k = (self.names.iter())
                .position(|name| name == decl.name())
                .ok_or_else(|| format!("output `{}` has no resident buffer", decl.name()))?;
            let mut bytes = (self.backend)
                .download_resident(&self.handles[k])
                .map_err(|e| e.to_string())?;
            // The reference returns a declared output range only (a tiled kernel's padded
            // storage, the scan's partials), and a backend may round allocations up.
            let range = (decl.output_byte_range()).unwrap_or(0..build::declared_bytes(decl)?);
            if bytes.len() < range.end {
                return Err(format!(
                    "output `{}`: {} bytes resident, {} expected",
                    decl.name(),
                    bytes.len(),
                    range.end
                ));
            }
            bytes.truncate(range.end);
            bytes.drain(..range.start);
            out.push(bytes);
        }
        Ok(out)
    }
}

impl Drop for Resident<'_> {
    fn drop(&mut self) {
        for handle in self.handles.drain(..) {
            let _ = self.backend.free_resident(handle);
        }
    }
}

/// GB/s and GOP/s of an engine's median, and their shares of the rooflines in percent
/// (the table prints extras to one decimal): the HBM share on memory-bound workloads, the
/// FP32 peak's on compute-bound ones.
fn with_rates(outcome: Outcome, job: &Job, roof: Roofline, bound: Bound) -> Outcome {
    let Outcome::Ok {
        stats,
        mut extra,
        note,
    } = outcome
    else {
        return outcome;
    };
    let gbps = job.bytes / stats.median_ns;
    extra.insert("gb_per_s".into(), gbps);
    if let (Bound::Memory, Some(hbm)) = (bound, roof.hbm_gbps) {
        extra.insert("hbm_roofline_pct".into(), 100.0 * gbps / hbm);
    }
    if let Some(ops) = job.ops {
        let gops = ops / stats.median_ns;
        extra.insert("gop_per_s".into(), gops);
        if let (Bound::Compute, Some(peak)) = (bound, roof.fp32_gflops) {
            extra.insert("fp32_roofline_pct".into(), 100.0 * gops / peak);
        }
    }
    Outcome::Ok { stats, extra, note }
}
