//! `tiny`, `tiny_cpu` and `warm_1024`: small end-to-end dispatches, every engine sampled
//! round-robin (one sample of each engine in turn, so clock and host drift hit all alike).

use crate::check::Expect;
use crate::cpu;
use crate::engines::floor::driver::{DevBuf, Floor, Pinned, Registered};
use crate::harness::{Ctx, Sink};
use crate::measure::R;
use crate::programs::{self, Rng, SALT};
use crate::report::{Outcome, Row, Stats};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;
use vyre_foundation::ir::Program;

/// Outcomes by engine name.
type Named = Vec<(String, Outcome)>;

/// `tiny` (and `tiny_cpu`): 1-element dispatch, the per-dispatch overhead.
pub fn tiny(ctx: &Ctx, sink: &mut Sink) {
    let program = programs::vadd(1, SALT);
    let mut rng = Rng::new(1);
    let (a, b) = (rng.u32_bytes(1), rng.u32_bytes(1));
    let expect = match programs::reference(&program, &[a.as_slice(), b.as_slice()]) {
        Ok(w) => Expect::Full(w),
        Err(e) => return sink.log(format!("tiny: reference failed: {e}")),
    };
    let n = ctx.samples(1000);
    let mut row = Row::new(
        "tiny",
        "end to end wall (upload, launch, readback, sync)",
        None,
    );
    let mut cpu_row = Row::new(
        "tiny_cpu",
        "host CPU time per warm dispatch (thread clock)",
        None,
    );
    let latency = Latency {
        program: &program,
        n: 1,
        a: &a,
        b: &b,
        expect: &expect,
        samples: n,
        cpu: true,
    };
    let (wall, cpu) = round_robin(ctx, &latency);
    let floor_note = "samples taken round-robin with the other engines; extra: pageable_two_uploads = the same round trip \
        from pageable memory with one upload per input; launch_sync_only = launch + stream sync, no copies; \
        blocking_event_wait = the pinned round trip waited on a blocking-sync event";
    row.engines.extend(wall);
    cpu_row.engines.extend(cpu);
    if let Some(Outcome::Ok { note, .. }) = row.engines.get_mut("floor") {
        *note = Some(floor_note.into());
    }
    row.notes.push("floor: both inputs in one 8-byte pinned upload, one launch, one 4-byte pinned readback, one stream sync; \
        every engine's samples interleaved round-robin (one sample of each in turn)".into());
    cpu_row.notes.push("CLOCK_THREAD_CPUTIME_ID around each warm dispatch, round-robin like `tiny` (a spinning stream sync counts); \
        extra.process_cpu_ns_per_dispatch: CLOCK_PROCESS_CPUTIME_ID over the loop / samples; floor \
        extra.blocking_event_wait_thread_cpu_median_ns: the floor's round trip waited on a blocking-sync event".into());
    sink.push(row);
    sink.push(cpu_row);
}

/// `warm_1024`: warm re-dispatch of a 1024-element vadd, end to end.
pub fn warm_1024(ctx: &Ctx, sink: &mut Sink) {
    let n = 1024usize;
    let program = programs::vadd(n as u32, SALT);
    let mut rng = Rng::new(2);
    let (a, b) = (rng.u32_bytes(n), rng.u32_bytes(n));
    let expect = match programs::reference(&program, &[a.as_slice(), b.as_slice()]) {
        Ok(w) => Expect::Full(w),
        Err(e) => return sink.log(format!("warm_1024: reference failed: {e}")),
    };
    let samples = ctx.samples(500);
    let mut row = Row::new(
        "warm_1024",
        "end to end wall, warm (1024 elements)",
        Some((n * 12) as f64),
    );
    let latency = Latency {
        program: &program,
        n,
        a: &a,
        b: &b,
        expect: &expect,
        samples,
        cpu: false,
    };
    let (wall, _) = round_robin(ctx, &latency);
    row.engines.extend(wall);
    row.notes.push(
        "floor: pinned staging, one upload of both inputs, one launch, one readback, one sync; \
        every engine's samples interleaved round-robin"
            .into(),
    );
    sink.push(row);
}

/// One round-robin latency measurement: a vadd over `n` elements of `a` and `b`.
struct Latency<'a> {
    program: &'a Program,
    n: usize,
    a: &'a [u8],
    b: &'a [u8],
    expect: &'a Expect,
    samples: usize,
    /// Also sample thread-CPU time, with the floor's diagnostic variants in the rotation.
    cpu: bool,
}

type Job<'a> = Box<dyn FnMut() -> R<()> + 'a>;
type Check<'a> = Box<dyn Fn() -> R<()> + 'a>;

/// One entry of the rotation. The check reads the job's output after one run. Names with
/// a `/` are the floor's diagnostic variants (extras of the floor's outcome, not rows).
struct Entry<'a> {
    name: String,
    job: Job<'a>,
    check: Check<'a>,
}

fn entry<'a>(name: &str, job: Job<'a>, check: Check<'a>) -> Entry<'a> {
    Entry {
        name: name.into(),
        job,
        check,
    }
}

/// Every engine checked once, then sampled round-robin. Returns wall outcomes and, with
/// `cpu`, thread-CPU outcomes.
fn round_robin(ctx: &Ctx, l: &Latency<'_>) -> (Named, Named) {
    let mut wall_out = Vec::new();
    let mut cpu_out = Vec::new();
    let floor = FloorTiny::new(ctx, l);
    if let Err(e) = &floor.base {
        wall_out.push((
            "floor".to_string(),
            Outcome::Unsupported { reason: e.clone() },
        ));
        cpu_out.push((
            "floor".to_string(),
            Outcome::Unsupported { reason: e.clone() },
        ));
    }
    let engines = ctx.engines.vyre();
    let outs: Vec<RefCell<Vec<Vec<u8>>>> =
        engines.iter().map(|_| RefCell::new(Vec::new())).collect();
    let inputs = [l.a, l.b];
    let mut jobs = floor.jobs(l);
    for (engine, slot) in engines.into_iter().zip(&outs) {
        let inputs = &inputs;
        jobs.push(entry(
            engine.name(),
            Box::new(move || {
                engine.dispatch(l.program, inputs, &ctx.config, &mut slot.borrow_mut())
            }),
            Box::new(move || l.expect.check(&slot.borrow())),
        ));
    }
    let active = check_once(&mut jobs, &mut wall_out, &mut cpu_out);
    // Warm up, then sample round-robin: wall, then thread CPU.
    let _ = sample(&mut jobs, &active, false, 50);
    let wall = sample(&mut jobs, &active, false, l.samples);
    let p0 = cpu::process();
    let thread_cpu = if l.cpu {
        sample(&mut jobs, &active, true, l.samples)
    } else {
        Vec::new()
    };
    let process_per_round = (cpu::process() - p0).as_secs_f64() * 1e9 / l.samples.max(1) as f64;
    let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    drop(jobs);
    let timed = Timed {
        names: &names,
        active: &active,
        wall,
        thread_cpu,
    };
    timed.outcomes(process_per_round, &mut wall_out, &mut cpu_out);
    (wall_out, cpu_out)
}

/// Run and check every job once; a job that errs or fails its check leaves the rotation
/// (an engine's verdict goes to both outcome lists, a floor variant's to stdout).
fn check_once(jobs: &mut [Entry<'_>], wall_out: &mut Named, cpu_out: &mut Named) -> Vec<bool> {
    let mut active = Vec::new();
    for Entry { name, job, check } in jobs.iter_mut() {
        let verdict = match job() {
            Err(err) => Some(Outcome::Unsupported { reason: err }),
            Ok(()) => check().err().map(|why| Outcome::Fail { reason: why }),
        };
        active.push(verdict.is_none());
        if let Some(v) = verdict {
            if !name.contains('/') {
                wall_out.push((name.clone(), v.clone()));
                cpu_out.push((name.clone(), v));
            } else {
                println!("    {name}: {} ({v:?})", v.label());
            }
        }
    }
    active
}

/// `count` rounds of one sample of every active job (ns of wall, or of thread CPU).
fn sample(
    jobs: &mut [Entry<'_>],
    active: &[bool],
    clock_cpu: bool,
    count: usize,
) -> Vec<R<Vec<f64>>> {
    let mut taken: Vec<R<Vec<f64>>> = jobs.iter().map(|_| Ok(Vec::with_capacity(count))).collect();
    for _ in 0..count {
        for (j, Entry { job, .. }) in jobs.iter_mut().enumerate() {
            if !active[j] {
                continue;
            }
            let Ok(list) = &mut taken[j] else { continue };
            let (t0, c0) = (Instant::now(), cpu::thread());
            let r = job();
            let sample = if clock_cpu {
                (cpu::thread() - c0).as_secs_f64() * 1e9
            } else {
                t0.elapsed().as_secs_f64() * 1e9
            };
            match r {
                Ok(()) => list.push(sample),
                Err(e) => taken[j] = Err(e),
            }
        }
    }
    taken
}

/// The samples of every job of a rotation.
struct Timed<'a> {
    names: &'a [String],
    active: &'a [bool],
    wall: Vec<R<Vec<f64>>>,
    thread_cpu: Vec<R<Vec<f64>>>,
}

fn stats(r: &R<Vec<f64>>) -> R<Stats> {
    match r {
        Ok(v) => Ok(Stats::from_ns(&mut v.clone())),
        Err(e) => Err(e.clone()),
    }
}

fn timed_outcome(r: R<Stats>) -> Outcome {
    match r {
        Ok(st) => Outcome::ok(st),
        Err(e) => Outcome::Fail {
            reason: format!("error while timing: {e}"),
        },
    }
}

impl Timed<'_> {
    /// Engines' outcomes into the lists; the floor variants' medians into the floor's
    /// extras; the process CPU of one round (every engine once) into every CPU outcome.
    fn outcomes(&self, process_per_round: f64, wall_out: &mut Named, cpu_out: &mut Named) {
        let mut floor_extra = BTreeMap::new();
        let mut floor_cpu_extra = BTreeMap::new();
        for (j, name) in self.names.iter().enumerate() {
            if !self.active[j] {
                continue;
            }
            let w = stats(&self.wall[j]);
            let c = self.thread_cpu.get(j).map(stats);
            if let Some(variant) = name.strip_prefix("floor/") {
                if let Ok(st) = &w {
                    floor_extra.insert(format!("{variant}_median_ns"), st.median_ns);
                }
                if let Some(Ok(st)) = &c {
                    floor_cpu_extra.insert(format!("{variant}_thread_cpu_median_ns"), st.median_ns);
                }
                continue;
            }
            wall_out.push((name.clone(), timed_outcome(w)));
            if let Some(c) = c {
                cpu_out.push((name.clone(), timed_outcome(c)));
            }
        }
        for (name, o) in wall_out.iter_mut() {
            if let (true, Outcome::Ok { extra, .. }) = (name == "floor", o) {
                extra.extend(floor_extra.clone());
            }
        }
        for (name, o) in cpu_out.iter_mut() {
            if let Outcome::Ok { extra, .. } = o {
                // Process CPU of one whole round (every engine once), shared by all.
                extra.insert(
                    "process_cpu_ns_per_round_all_engines".into(),
                    process_per_round,
                );
                if name == "floor" {
                    extra.extend(floor_cpu_extra.clone());
                }
            }
        }
    }
}

/// The floor's buffers for the round trip and, for `tiny` with `cpu`, its variants'.
struct FloorTiny<'f> {
    /// The floor, its device buffer, both inputs pinned, the pinned output.
    base: R<(&'f Floor, DevBuf, Pinned, RefCell<Pinned>)>,
    page_out: RefCell<Vec<u8>>,
    /// `cuMemHostRegister`ed instead of `cuMemHostAlloc` memory.
    registered: Option<(Registered, RefCell<Registered>)>,
    /// vyre-cuda's packed copy sizes (516 bytes up, 20 down).
    wide: Option<(Pinned, DevBuf, RefCell<Pinned>)>,
}

impl<'f> FloorTiny<'f> {
    fn new(ctx: &'f Ctx, l: &Latency<'_>) -> Self {
        let (n, a, b) = (l.n, l.a, l.b);
        let base = (|| -> R<(&Floor, DevBuf, Pinned, RefCell<Pinned>)> {
            let floor = ctx.engines.floor.device()?;
            let dev = DevBuf::new(Floor::tiny_bytes(n))?;
            let mut ab = Pinned::new(8 * n)?;
            ab.as_mut_slice()[..4 * n].copy_from_slice(a);
            ab.as_mut_slice()[4 * n..].copy_from_slice(b);
            let out = Pinned::new(4 * n)?;
            Ok((floor, dev, ab, RefCell::new(out)))
        })();
        let page_out = RefCell::new(vec![0u8; 4 * n]);
        // Diagnostic variants (n == 1 only).
        let variants = n == 1 && l.cpu;
        let registered = variants
            .then(|| -> R<(Registered, Registered)> {
                let mut ab = Registered::new(8)?;
                ab.as_mut_slice()[..4].copy_from_slice(a);
                ab.as_mut_slice()[4..].copy_from_slice(b);
                Ok((ab, Registered::new(4)?))
            })
            .and_then(Result::ok)
            .map(|(ab, out)| (ab, RefCell::new(out)));
        let wide = variants
            .then(|| -> R<(Pinned, DevBuf, Pinned)> {
                let mut packed = Pinned::new(516)?;
                packed.as_mut_slice().fill(0);
                packed.as_mut_slice()[..4].copy_from_slice(a);
                packed.as_mut_slice()[256..260].copy_from_slice(b);
                Ok((packed, DevBuf::new(1024)?, Pinned::new(20)?))
            })
            .and_then(Result::ok)
            .map(|(p, d, o)| (p, d, RefCell::new(o)));
        Self {
            base,
            page_out,
            registered,
            wide,
        }
    }

    /// The floor's entries of the rotation: its round trip and, with `cpu`, its variants.
    fn jobs<'a>(&'a self, l: &'a Latency<'a>) -> Vec<Entry<'a>> {
        let mut jobs = Vec::new();
        let Ok((floor, dev, ab, out)) = &self.base else {
            return jobs;
        };
        let (floor, expect) = (*floor, l.expect);
        jobs.push(entry(
            "floor",
            Box::new(move || floor.tiny_e2e(ab.as_slice(), out.borrow_mut().as_mut_slice(), dev)),
            Box::new(move || expect.check_one(out.borrow().as_slice())),
        ));
        if l.cpu {
            self.variant_jobs(floor, l, &mut jobs);
        }
        jobs
    }

    fn variant_jobs<'a>(&'a self, floor: &'a Floor, l: &'a Latency<'a>, jobs: &mut Vec<Entry<'a>>) {
        let Ok((_, dev, ab, out)) = &self.base else {
            return;
        };
        let expect = l.expect;
        if let Some((reg_ab, reg_out)) = &self.registered {
            jobs.push(entry(
                "floor/registered_host",
                Box::new(move || {
                    floor.tiny_e2e(reg_ab.as_slice(), reg_out.borrow_mut().as_mut_slice(), dev)
                }),
                Box::new(move || expect.check_one(reg_out.borrow().as_slice())),
            ));
        }
        if let Some((wide_in, wide_dev, wide_out)) = &self.wide {
            jobs.push(entry(
                "floor/packed_copy_sizes",
                Box::new(move || {
                    floor.tiny_packed_sizes(
                        wide_in.as_slice(),
                        &mut wide_out.borrow_mut().as_mut_slice()[..],
                        wide_dev,
                    )
                }),
                Box::new(move || expect.check_one(&wide_out.borrow().as_slice()[..4])),
            ));
        }
        let page_out = &self.page_out;
        jobs.push(entry(
            "floor/pageable_two_uploads",
            Box::new(move || floor.tiny_pageable(l.a, l.b, &mut page_out.borrow_mut(), dev)),
            Box::new(move || expect.check_one(&page_out.borrow())),
        ));
        jobs.push(entry(
            "floor/launch_sync_only",
            Box::new(move || floor.launch_sync(dev)),
            Box::new(|| Ok(())),
        ));
        jobs.push(entry(
            "floor/blocking_event_wait",
            Box::new(move || {
                floor.tiny_e2e_blocking(ab.as_slice(), out.borrow_mut().as_mut_slice(), dev)
            }),
            Box::new(move || expect.check_one(out.borrow().as_slice())),
        ));
    }
}
