//! `diagnostics` (in the JSON and the log, not the table): where the time goes. Per
//! dispatch metric deltas and the enqueue / wait / device split of both backends, the
//! resident sequence's split, raw transfer rates through the floor, and the driver's JIT
//! time of each engine's PTX (default level, and each `CU_JIT_OPTIMIZATION_LEVEL`).

use crate::engines::floor::driver::{DevBuf, Floor, Jit, Pinned};
use crate::engines::floor::ptx;
use crate::harness::{Ctx, Sink};
use crate::measure::{measure, timed, R};
use crate::programs::{self, Rng, SALT};
use crate::report::Stats;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use vyre_driver::backend::{ResidentDispatchStep, ResidentReadRange};
use vyre_driver::{DispatchConfig, VyreBackend};
use vyre_foundation::ir::Program;

type Values = BTreeMap<String, f64>;

pub fn run(ctx: &Ctx, sink: &mut Sink) {
    let mut diag: BTreeMap<String, Values> = BTreeMap::new();
    let mut errors = Vec::new();
    phases(ctx, &mut diag, &mut errors);
    sequence_split(ctx, &mut diag);
    if let Some(floor) = ctx.engines.floor.get() {
        diag.insert("transfers (64 MiB, floor)".into(), transfers(floor));
        diag.insert(
            "cold: PTX generation and JIT of a fresh 1024-element vadd".into(),
            cold_jit(ctx, floor),
        );
        diag.insert(
            "cold: driver JIT time by CU_JIT_OPTIMIZATION_LEVEL".into(),
            jit_levels(ctx, floor),
        );
    }
    for line in errors {
        sink.log(line);
    }
    for (k, v) in &diag {
        sink.log(format!("diag {k}:"));
        for (name, x) in v {
            sink.log(format!("    {name} = {x:.1}"));
        }
    }
    sink.report.diagnostics.extend(diag);
    sink.save();
}

/// Phase times (wall, enqueue, wait, device) of a timed dispatch, by name.
#[derive(Default)]
struct Split {
    wall: Vec<f64>,
    enqueue: Vec<f64>,
    wait: Vec<f64>,
    device: Vec<f64>,
}

impl Split {
    fn add(&mut self, wall: f64, enqueue: Option<f64>, wait: Option<f64>, device: Option<f64>) {
        self.wall.push(wall);
        self.enqueue.extend(enqueue);
        self.wait.extend(wait);
        self.device.extend(device);
    }

    /// `{prefix}.{phase}_ns.median` for each phase with samples.
    fn medians(mut self, prefix: &str, m: &mut Values) {
        for (name, v) in [
            ("wall_ns", &mut self.wall),
            ("enqueue_ns", &mut self.enqueue),
            ("wait_ns", &mut self.wait),
            ("device_ns", &mut self.device),
        ] {
            if !v.is_empty() {
                m.insert(
                    format!("{prefix}.{name}.median"),
                    Stats::from_ns(v).median_ns,
                );
            }
        }
    }
}

/// Phase times from `dispatch_borrowed_timed`, and metric deltas per dispatch.
fn phases(ctx: &Ctx, diag: &mut BTreeMap<String, Values>, errors: &mut Vec<String>) {
    for (label, n, reps) in [
        ("tiny", 1usize, 200usize),
        ("warm_1024", 1024, 200),
        ("vadd_2^26", 1 << 26, 5),
        ("reduce_atomic_2^24", 1 << 24, 5),
    ] {
        let reduce = label.starts_with("reduce");
        let program = if reduce {
            programs::reduce_atomic(n as u32)
        } else {
            programs::vadd(n as u32, SALT)
        };
        let mut rng = Rng::new(5);
        let (a, b) = (rng.u32_bytes(n), rng.u32_bytes(if reduce { 0 } else { n }));
        let both = [a.as_slice(), b.as_slice()];
        let inputs: &[&[u8]] = if reduce { &both[..1] } else { &both };
        for e in ctx.engines.vyre() {
            let Some(backend) = e.backend() else {
                continue;
            };
            let m = match phase_split(backend, &program, inputs, reps, &ctx.config) {
                (m, Some(err)) => {
                    errors.push(format!("diag {label} {}: {err}", e.name()));
                    m
                }
                (m, None) => m,
            };
            diag.insert(format!("{label}/{}", e.name()), m);
        }
    }
}

/// `reps` timed dispatches (stopping at the first error, returned too) and the metric
/// deltas per dispatch.
fn phase_split(
    backend: &dyn VyreBackend,
    program: &Program,
    inputs: &[&[u8]],
    reps: usize,
    config: &DispatchConfig,
) -> (Values, Option<String>) {
    let mut m = BTreeMap::new();
    let mut error = None;
    let before = metrics(backend);
    let mut split = Split::default();
    for _ in 0..reps {
        match backend.dispatch_borrowed_timed(program, inputs, config) {
            Ok(t) => split.add(
                t.wall_ns as f64,
                t.enqueue_ns.map(|x| x as f64),
                t.wait_ns.map(|x| x as f64),
                t.device_ns.map(|x| x as f64),
            ),
            Err(err) => {
                error = Some(err.to_string());
                break;
            }
        }
    }
    let after = metrics(backend);
    split.medians("timed", &mut m);
    for (name, v) in &after {
        let d = v - before.get(name).copied().unwrap_or(0.0);
        if d != 0.0 {
            m.insert(format!("metric_per_dispatch.{name}"), d / reps as f64);
        }
    }
    (m, error)
}

fn metrics(backend: &dyn VyreBackend) -> Values {
    backend
        .backend_metric_snapshot()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v as f64))
        .collect()
}

/// The resident sequence's own timing split (enqueue / wait / device), 30 runs.
fn sequence_split(ctx: &Ctx, diag: &mut BTreeMap<String, Values>) {
    let n = 4096usize;
    let program = programs::step(n as u32);
    let x0 = Rng::new(98).u32_bytes(n);
    for e in ctx.engines.vyre() {
        let Some(backend) = e.backend() else {
            continue;
        };
        let mut m = BTreeMap::new();
        if let Err(err) = sequence_timed(backend, &program, &x0, &mut m) {
            m.insert(format!("error: {err}"), 0.0);
        }
        diag.insert(format!("resident_sequence_100/{}", e.name()), m);
    }
}

fn sequence_timed(
    backend: &dyn VyreBackend,
    program: &Program,
    x0: &[u8],
    m: &mut Values,
) -> R<()> {
    let x = backend
        .allocate_resident(x0.len())
        .map_err(|e| e.to_string())?;
    backend.upload_resident(&x, x0).map_err(|e| e.to_string())?;
    let resources = [x.clone()];
    let list: Vec<ResidentDispatchStep<'_>> = (0..100)
        .map(|_| ResidentDispatchStep {
            program,
            resources: &resources,
            grid_override: None,
            workgroup_override: None,
        })
        .collect();
    let ranges = [ResidentReadRange {
        resource: &x,
        byte_offset: 0,
        byte_len: x0.len(),
    }];
    let mut out = Vec::new();
    let mut split = Split::default();
    for _ in 0..30 {
        let t = backend
            .dispatch_resident_sequence_read_ranges_timed_into(&list, &ranges, &mut [&mut out])
            .map_err(|e| e.to_string())?;
        split.add(
            t.wall_ns as f64,
            t.enqueue_ns.map(|v| v as f64),
            t.wait_ns.map(|v| v as f64),
            t.device_ns.map(|v| v as f64),
        );
    }
    let _ = backend.free_resident(x);
    split.medians("sequence100", m);
    Ok(())
}

/// Raw transfer rates through the floor (GB/s), and host copies for comparison.
fn transfers(floor: &Floor) -> Values {
    let n = 64usize << 20; // 64 MiB
    let mut m = BTreeMap::new();
    if let Err(e) = transfer_rates(floor, n, &mut m) {
        m.insert(format!("error: {e}"), 0.0);
    }
    m
}

fn transfer_rates(floor: &Floor, n: usize, m: &mut Values) -> R<()> {
    let dev = DevBuf::new(n)?;
    let mut pinned = Pinned::new(n)?;
    let mut pageable = vec![0x5Au8; n];
    pinned.as_mut_slice().fill(0x3C);
    let mut rate = |name: &str, f: &mut dyn FnMut() -> R<()>| -> R<()> {
        let s = measure(2, 10, Duration::from_secs(10), || timed(&mut *f))?;
        m.insert(format!("{name}_GBps"), n as f64 / s.median_ns);
        Ok(())
    };
    rate("h2d_pinned", &mut || floor.upload(&dev, pinned.as_slice()))?;
    rate("h2d_pageable", &mut || floor.upload(&dev, &pageable))?;
    rate("d2h_pinned", &mut || {
        floor.download(pinned.as_mut_slice(), &dev)
    })?;
    rate("d2h_pageable", &mut || floor.download(&mut pageable, &dev))?;
    let src = vec![0x11u8; n];
    rate("host_memcpy_pageable_to_pinned", &mut || {
        pinned.as_mut_slice().copy_from_slice(&src);
        Ok(())
    })?;
    rate("host_memcpy_pageable_to_pinned_8_threads", &mut || {
        let dst = pinned.as_mut_slice();
        let piece = n / 8;
        std::thread::scope(|scope| {
            for (d, s) in dst.chunks_mut(piece).zip(src.chunks(piece)) {
                scope.spawn(move || d.copy_from_slice(s));
            }
        });
        Ok(())
    })?;
    let mut reused: Vec<u8> = Vec::with_capacity(n);
    rate("host_vec_clear_resize_zero_fill", &mut || {
        reused.clear();
        reused.resize(n, 0);
        std::hint::black_box(&reused);
        Ok(())
    })?;
    Ok(())
}

/// Generation and JIT (`cuModuleLoadData`) time of each engine's PTX for a fresh
/// 1024-element vadd, 10 times.
fn cold_jit(ctx: &Ctx, floor: &Floor) -> Values {
    let mut m = BTreeMap::new();
    let (major, minor) = floor.facts.compute_capability;
    jit_fresh(floor, "floor", &mut m, &|s| {
        Some(Ok(ptx::cold_module(major, minor, s)))
    });
    for e in ctx.engines.vyre() {
        jit_fresh(floor, e.name(), &mut m, &|s| {
            e.device_ptx(&programs::vadd(1024, s), &ctx.config)
        });
    }
    m
}

/// `text(salt)` generated and JIT-compiled 10 times (an engine that cannot generate here
/// leaves no keys).
fn jit_fresh(floor: &Floor, name: &str, m: &mut Values, text: &dyn Fn(u32) -> Option<R<String>>) {
    let mut times = Vec::new();
    let mut gen = Vec::new();
    for k in 0..10u32 {
        let s = 0x2000_0000 + k * 7 + (std::process::id() % 1000) * 100;
        let started = Instant::now();
        let t = match text(s) {
            None => return,
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                m.insert(format!("{name}.error: {e}"), 0.0);
                return;
            }
        };
        gen.push(started.elapsed().as_secs_f64() * 1e9);
        match floor.jit_time(&t, Jit::Load) {
            Ok(d) => times.push(d.as_secs_f64() * 1e9),
            Err(e) => {
                m.insert(format!("{name}.jit_error: {e}"), 0.0);
                return;
            }
        }
        if k == 0 {
            m.insert(format!("{name}.ptx_bytes"), t.len() as f64);
        }
    }
    m.insert(
        format!("{name}.generate_ns.median"),
        Stats::from_ns(&mut gen).median_ns,
    );
    m.insert(
        format!("{name}.jit_ns.median"),
        Stats::from_ns(&mut times).median_ns,
    );
}

/// The driver JIT at each optimisation level, on each engine's PTX for a fresh program
/// (what a tiered compile could save on a cold dispatch).
fn jit_levels(ctx: &Ctx, floor: &Floor) -> Values {
    let mut m = BTreeMap::new();
    let mut levels: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let (major, minor) = floor.facts.compute_capability;
    for level in 0..=4u32 {
        for k in 0..5u32 {
            let s = 0x3000_0000 + level * 64 + k + (std::process::id() % 1000) * 1000;
            let mut texts = vec![("floor", Some(ptx::cold_module(major, minor, s)))];
            // Engine i (from 1) compiles the vadd with literal s ^ (i << 24).
            for (i, e) in (1u32..).zip(ctx.engines.vyre()) {
                let program = programs::vadd(1024, s ^ (i << 24));
                let text = e.device_ptx(&program, &ctx.config).and_then(Result::ok);
                texts.push((e.name(), text));
            }
            for (name, text) in texts {
                let Some(text) = text else { continue };
                let key = format!("{name}.O{level}.jit_ns");
                match floor.jit_time(&text, Jit::Level(level)) {
                    Ok(d) => levels.entry(key).or_default().push(d.as_secs_f64() * 1e9),
                    Err(e) => {
                        m.insert(format!("{key}.error: {e}"), 0.0);
                    }
                }
            }
        }
    }
    for (key, mut v) in levels {
        m.insert(format!("{key}.median"), Stats::from_ns(&mut v).median_ns);
    }
    m
}
