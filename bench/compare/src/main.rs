//! Side-by-side benchmark of three engines on one GPU, in one process:
//!
//! * **floor**: the CUDA driver API called directly with hand-written PTX and pinned memory;
//! * **incumbent**: the published `vyre-driver-cuda 0.6.5`, through its `VyreBackend`;
//! * **vyre-cuda**: this repository's `CudaBackend`.
//!
//! Every workload first checks each engine's output against vyre-reference (non-zero random
//! data); a wrong engine is marked FAIL and left out of the ratios, an engine that cannot run
//! a workload is reported as unsupported. Run `cargo run --release -- --help`.

mod cpu;
mod floor;
mod programs;
mod ptx;
mod report;

use floor::{DevBuf, Floor, Jit, Kernel, Pinned, Registered};
use programs::{Rng, ALPHA, SALT};
use report::{fmt_time, Outcome, Report, Row, Stats};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vyre_driver::backend::{ResidentDispatchStep, ResidentReadRange};
use vyre_driver::{DispatchConfig, VyreBackend};
use vyre_foundation::ir::Program;

type R<T> = Result<T, String>;

const USAGE: &str = "\
vyre-compare: floor vs vyre-driver-cuda 0.6.5 vs vyre-cuda, on one GPU

  cargo run --release -- [options]

  --json PATH        write the results as JSON (default: compare.json)
  --svg PATH         render the ratio chart as SVG
  --markdown PATH    write the table and the target table as markdown
  --only a,b,...     run only these workloads (ids or prefixes: tiny, warm, cold, emit,
                     vadd, saxpy, resident, sequence, reduce, corpus, diag)
  --quick            fewer samples and sizes (a smoke run, not for reporting)
  --deadline-s S     skip the workloads that would start after S seconds (default 480)
  --blocking-sync    set CU_CTX_SCHED_BLOCKING_SYNC on the primary context first (waits
                     sleep instead of spinning: CPU-time experiments; not for the table)
  --ours-blocking-wait
                     open vyre-cuda with CudaOptions::blocking_wait (its small-dispatch and
                     sequence waits sleep on blocking-sync events; the context is untouched)
  --staging-sweep    also time vyre-cuda on the vadd and reduce rows with other staging chunk
                     sizes and copy-thread counts (extra keys sweep.*; tuning, not the table)
  --only jit_probe   (run only when named) driver JIT time per method (load, O0, linker) on
                     the floor's, the incumbent's and vyre-cuda's PTX, vadd and the corpus
  --render JSON      no GPU: read a results file, print the tables, write --svg/--markdown
  --dump-ptx DIR     no GPU: write the floor's PTX (for ptxas) and exit
";

struct Opts {
    json: PathBuf,
    svg: Option<PathBuf>,
    markdown: Option<PathBuf>,
    only: Option<Vec<String>>,
    quick: bool,
    render: Option<PathBuf>,
    dump_ptx: Option<PathBuf>,
    deadline: Duration,
    blocking_sync: bool,
    ours_blocking_wait: bool,
    staging_sweep: bool,
}

fn parse_opts() -> Opts {
    let mut opts = Opts {
        json: PathBuf::from("compare.json"),
        svg: None,
        markdown: None,
        only: None,
        quick: false,
        render: None,
        dump_ptx: None,
        deadline: Duration::from_secs(480),
        blocking_sync: false,
        ours_blocking_wait: false,
        staging_sweep: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("{name} needs a value\n{USAGE}");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--json" => opts.json = value("--json").into(),
            "--svg" => opts.svg = Some(value("--svg").into()),
            "--markdown" => opts.markdown = Some(value("--markdown").into()),
            "--only" => opts.only = Some(value("--only").split(',').map(str::to_string).collect()),
            "--quick" => opts.quick = true,
            "--blocking-sync" => opts.blocking_sync = true,
            "--ours-blocking-wait" => opts.ours_blocking_wait = true,
            "--staging-sweep" => opts.staging_sweep = true,
            "--render" => opts.render = Some(value("--render").into()),
            "--dump-ptx" => opts.dump_ptx = Some(value("--dump-ptx").into()),
            "--deadline-s" => {
                let v = value("--deadline-s");
                opts.deadline = Duration::from_secs(v.parse().unwrap_or_else(|_| {
                    eprintln!("--deadline-s {v}: not a number of seconds");
                    std::process::exit(2)
                }))
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0)
            }
            other => {
                eprintln!("unknown argument {other}\n{USAGE}");
                std::process::exit(2)
            }
        }
    }
    opts
}

/// What a check compares an engine's output with.
enum Expect {
    /// The reference's outputs for the whole workload.
    Full(Vec<Vec<u8>>),
    /// The reference's outputs for elements `idx` of the single output, computed by running
    /// the same program shape on the gathered inputs (elementwise programs only).
    Sampled {
        idx: Vec<usize>,
        want: Vec<u8>,
        out_bytes: usize,
    },
}

impl Expect {
    fn check(&self, got: &[Vec<u8>]) -> R<()> {
        match self {
            Expect::Full(want) => {
                if got.len() != want.len() {
                    return Err(format!(
                        "{} outputs, the reference has {}",
                        got.len(),
                        want.len()
                    ));
                }
                for (k, (g, w)) in got.iter().zip(want).enumerate() {
                    compare(k, g, w)?;
                }
                Ok(())
            }
            Expect::Sampled { .. } => {
                if got.len() != 1 {
                    return Err(format!("{} outputs, the reference has 1", got.len()));
                }
                self.check_one(&got[0])
            }
        }
    }

    fn check_one(&self, got: &[u8]) -> R<()> {
        match self {
            Expect::Full(want) => {
                if want.len() != 1 {
                    return Err(format!("1 output, the reference has {}", want.len()));
                }
                compare(0, got, &want[0])
            }
            Expect::Sampled {
                idx,
                want,
                out_bytes,
            } => {
                if got.len() != *out_bytes {
                    return Err(format!(
                        "output has {} bytes, expected {out_bytes}",
                        got.len()
                    ));
                }
                compare(0, &programs::gather(got, idx), want)
                    .map_err(|e| format!("{e} (sampled check: element index list position)"))
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Expect::Full(_) => "checked in full against vyre-reference".into(),
            Expect::Sampled { idx, .. } => format!(
                "checked against vyre-reference on {} sampled elements (first and last 2^15 and random ones; \
                 reference run on the same program over the gathered inputs)",
                idx.len()
            ),
        }
    }
}

fn compare(output: usize, got: &[u8], want: &[u8]) -> R<()> {
    if got.len() != want.len() {
        return Err(format!(
            "output {output}: {} bytes, the reference has {}",
            got.len(),
            want.len()
        ));
    }
    if let Some(pos) = got.iter().zip(want).position(|(g, w)| g != w) {
        let word = pos / 4;
        let read = |b: &[u8]| {
            let s = word * 4;
            b.get(s..s + 4)
                .map(|w| format!("{:#010x}", u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
                .unwrap_or_default()
        };
        let differing = got
            .chunks(4)
            .zip(want.chunks(4))
            .filter(|(g, w)| g != w)
            .count();
        return Err(format!(
            "output {output}: {differing} words differ from vyre-reference, first at word {word}: got {} want {}",
            read(got),
            read(want)
        ));
    }
    Ok(())
}

fn expect_elementwise(make: &dyn Fn(u32) -> Program, n: usize, inputs: &[&[u8]]) -> R<Expect> {
    if n <= 1 << 16 {
        return Ok(Expect::Full(programs::reference(&make(n as u32), inputs)?));
    }
    let idx = programs::sample_indices(n, 1 << 15, 1 << 15, n as u64);
    let gathered: Vec<Vec<u8>> = inputs.iter().map(|b| programs::gather(b, &idx)).collect();
    let borrowed: Vec<&[u8]> = gathered.iter().map(Vec::as_slice).collect();
    let mut want = programs::reference(&make(idx.len() as u32), &borrowed)?;
    if want.len() != 1 {
        return Err(format!("reference returned {} outputs", want.len()));
    }
    Ok(Expect::Sampled {
        idx,
        want: want.remove(0),
        out_bytes: n * 4,
    })
}

/// Warm up, then time `f` until `samples` samples (or the budget, keeping at least 10).
fn measure(
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

fn timed(f: impl FnOnce() -> R<()>) -> R<Duration> {
    let started = Instant::now();
    f()?;
    Ok(started.elapsed())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Eng {
    Inc,
    Ours,
}

impl Eng {
    fn name(self) -> &'static str {
        match self {
            Eng::Inc => "incumbent",
            Eng::Ours => "vyre-cuda",
        }
    }
}

struct Harness {
    opts: Opts,
    floor: Option<Floor>,
    inc: Option<Box<dyn VyreBackend>>,
    ours: Option<vyre_cuda::CudaBackend>,
    report: Report,
    config: DispatchConfig,
    budget: Duration,
}

impl Harness {
    fn wants(&self, id: &str) -> bool {
        match &self.opts.only {
            None => true,
            Some(list) => list.iter().any(|w| id.starts_with(w.as_str())),
        }
    }

    fn samples(&self, full: usize) -> usize {
        if self.opts.quick {
            (full / 5).max(10)
        } else {
            full
        }
    }

    fn log(&mut self, line: String) {
        println!("{line}");
        self.report.log.push(line);
    }

    fn backend(&self, e: Eng) -> Option<&dyn VyreBackend> {
        match e {
            Eng::Inc => self.inc.as_deref(),
            Eng::Ours => self.ours.as_ref().map(|b| b as &dyn VyreBackend),
        }
    }

    /// One borrowed end-to-end dispatch through an engine, outputs into `out`.
    fn dispatch(
        &self,
        e: Eng,
        program: &Program,
        inputs: &[&[u8]],
        out: &mut Vec<Vec<u8>>,
    ) -> R<()> {
        self.backend(e)
            .ok_or_else(|| "engine not available".to_string())?
            .dispatch_borrowed_into(program, inputs, &self.config, out)
            .map_err(|err| err.to_string())
    }

    /// Check, then time, one engine on an end-to-end borrowed dispatch.
    fn backend_e2e(
        &self,
        e: Eng,
        program: &Program,
        inputs: &[&[u8]],
        expect: &Expect,
        warmup: usize,
        samples: usize,
    ) -> Outcome {
        match self.backend(e) {
            Some(backend) => self.e2e_on(backend, program, inputs, expect, warmup, samples),
            None => Outcome::Unsupported {
                reason: "engine not available".into(),
            },
        }
    }

    /// Check, then time, `backend` on an end-to-end borrowed dispatch.
    fn e2e_on(
        &self,
        backend: &dyn VyreBackend,
        program: &Program,
        inputs: &[&[u8]],
        expect: &Expect,
        warmup: usize,
        samples: usize,
    ) -> Outcome {
        let mut out = Vec::new();
        let dispatch = |out: &mut Vec<Vec<u8>>| {
            backend
                .dispatch_borrowed_into(program, inputs, &self.config, out)
                .map_err(|err| err.to_string())
        };
        if let Err(err) = dispatch(&mut out) {
            return Outcome::Unsupported { reason: err };
        }
        if let Err(why) = expect.check(&out) {
            return Outcome::Fail { reason: why };
        }
        match measure(warmup, samples, self.budget, || {
            timed(|| dispatch(&mut out))
        }) {
            Ok(stats) => Outcome::ok(stats),
            Err(err) => Outcome::Fail {
                reason: format!("error while timing: {err}"),
            },
        }
    }

    /// `--staging-sweep`: vyre-cuda's end-to-end median for `program` under other staging
    /// chunk sizes and copy-thread counts (fresh backends; each checked before timing).
    fn staging_sweep(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        expect: &Expect,
        samples: usize,
    ) -> BTreeMap<String, f64> {
        let mut found = BTreeMap::new();
        if !self.opts.staging_sweep {
            return found;
        }
        for chunk_kib in [256usize, 512, 1024, 2048, 4096] {
            for threads in [4usize, 8, 15] {
                let key = format!("sweep.chunk_{chunk_kib}k.threads_{threads}.median_ns");
                let outcome = open_ours(|options| {
                    options.staging_chunk_bytes = chunk_kib << 10;
                    options.copy_threads = threads;
                })
                .map(|backend| self.e2e_on(&backend, program, inputs, expect, 2, samples));
                match outcome {
                    Ok(Outcome::Ok { stats, .. }) => {
                        found.insert(key, stats.median_ns);
                    }
                    Ok(Outcome::Fail { reason } | Outcome::Unsupported { reason })
                    | Err(reason) => {
                        found.insert(format!("{key}.error: {reason}"), 0.0);
                    }
                }
            }
        }
        found
    }

    /// Adds `--staging-sweep` results to vyre-cuda's outcome in `row` and logs them.
    fn attach_sweep(&mut self, row: &mut Row, sweep: BTreeMap<String, f64>) {
        for (k, v) in &sweep {
            self.log(format!("    {} {k} = {v:.0}", row.id));
        }
        if let Some(Outcome::Ok { extra, .. }) = row.engines.get_mut(Eng::Ours.name()) {
            extra.extend(sweep);
        }
    }

    fn push(&mut self, row: Row) {
        let mut line = format!("{:<24} {:<44}", row.id, row.measure);
        for engine in report::ENGINES {
            if let Some(o) = row.engines.get(engine) {
                let v = match o.median() {
                    Some(m) => fmt_time(m),
                    None => o.label().to_string(),
                };
                line.push_str(&format!(" | {engine}: {v}"));
            }
        }
        self.log(line);
        for engine in report::ENGINES {
            if let Some(Outcome::Fail { reason } | Outcome::Unsupported { reason }) =
                row.engines.get(engine)
            {
                let short: String = reason.chars().take(400).collect();
                self.log(format!("    {engine}: {short}"));
            }
        }
        self.report.rows.push(row);
        self.save();
    }

    fn save(&self) {
        if let Ok(text) = serde_json::to_string_pretty(&self.report) {
            let _ = std::fs::write(&self.opts.json, text);
        }
    }

    fn floor_or(&self) -> R<&Floor> {
        self.floor
            .as_ref()
            .ok_or_else(|| "the floor could not open the device".to_string())
    }

    // ------------------------------------------------------------------ workloads

    /// `tiny` (and `tiny_cpu`): 1-element dispatch, the per-dispatch overhead.
    fn tiny(&mut self) {
        let program = programs::vadd(1, SALT);
        let mut rng = Rng::new(1);
        let (a, b) = (rng.u32_bytes(1), rng.u32_bytes(1));
        let expect = match programs::reference(&program, &[a.as_slice(), b.as_slice()]) {
            Ok(w) => Expect::Full(w),
            Err(e) => return self.log(format!("tiny: reference failed: {e}")),
        };
        let n = self.samples(1000);
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
        let (wall, cpu) = self.latency_round_robin(&program, 1, &a, &b, &expect, n, true);
        let floor_note = "samples taken round-robin with the other engines; extra: pageable_two_uploads = the same round trip \
            from pageable memory with one upload per input; launch_sync_only = launch + stream sync, no copies; \
            blocking_event_wait = the pinned round trip waited on a blocking-sync event";
        for (engine, outcome) in wall {
            row.engines.insert(engine, outcome);
        }
        for (engine, outcome) in cpu {
            cpu_row.engines.insert(engine, outcome);
        }
        if let Some(Outcome::Ok { note, .. }) = row.engines.get_mut("floor") {
            *note = Some(floor_note.into());
        }
        row.notes.push("floor: both inputs in one 8-byte pinned upload, one launch, one 4-byte pinned readback, one stream sync; \
            every engine's samples interleaved round-robin (one sample of each in turn)".into());
        cpu_row.notes.push("CLOCK_THREAD_CPUTIME_ID around each warm dispatch, round-robin like `tiny` (a spinning stream sync counts); \
            extra.process_cpu_ns_per_dispatch: CLOCK_PROCESS_CPUTIME_ID over the loop / samples; floor \
            extra.blocking_event_wait_thread_cpu_median_ns: the floor's round trip waited on a blocking-sync event".into());
        self.push(row);
        self.push(cpu_row);
    }

    /// `warm_1024`: warm re-dispatch of a 1024-element vadd, end to end.
    fn warm_1024(&mut self) {
        let n = 1024usize;
        let program = programs::vadd(n as u32, SALT);
        let mut rng = Rng::new(2);
        let (a, b) = (rng.u32_bytes(n), rng.u32_bytes(n));
        let expect = match programs::reference(&program, &[a.as_slice(), b.as_slice()]) {
            Ok(w) => Expect::Full(w),
            Err(e) => return self.log(format!("warm_1024: reference failed: {e}")),
        };
        let samples = self.samples(500);
        let mut row = Row::new(
            "warm_1024",
            "end to end wall, warm (1024 elements)",
            Some((n * 12) as f64),
        );
        let (wall, _) = self.latency_round_robin(&program, n, &a, &b, &expect, samples, false);
        for (engine, outcome) in wall {
            row.engines.insert(engine, outcome);
        }
        row.notes.push("floor: pinned staging, one upload of both inputs, one launch, one readback, one sync; \
            every engine's samples interleaved round-robin".into());
        self.push(row);
    }

    /// Small end-to-end dispatches of `program` (a vadd over `n` elements), every engine
    /// checked once, then sampled round-robin (one sample of each engine in turn, so clock
    /// and host drift hit all alike). Returns wall outcomes and, with `cpu`, thread-CPU
    /// outcomes; with `cpu` the floor's diagnostic variants run in the rotation too.
    #[allow(clippy::too_many_arguments)]
    fn latency_round_robin(
        &self,
        program: &Program,
        n: usize,
        a: &[u8],
        b: &[u8],
        expect: &Expect,
        samples: usize,
        cpu: bool,
    ) -> (Named, Named) {
        type Job<'a> = Box<dyn FnMut() -> R<()> + 'a>;
        type Check<'a> = Box<dyn Fn() -> R<()> + 'a>;
        let inputs = [a, b];
        let mut wall_out = Vec::new();
        let mut cpu_out = Vec::new();
        // Floor resources.
        let floor_parts = (|| -> R<(&Floor, DevBuf, Pinned, Pinned)> {
            let floor = self.floor_or()?;
            let dev = DevBuf::new(Floor::tiny_bytes(n))?;
            let mut ab = Pinned::new(8 * n)?;
            ab.as_mut_slice()[..4 * n].copy_from_slice(a);
            ab.as_mut_slice()[4 * n..].copy_from_slice(b);
            let out = Pinned::new(4 * n)?;
            Ok((floor, dev, ab, out))
        })();
        let (floor, dev, ab, out) = match floor_parts {
            Ok((f, d, ab, o)) => (Some(f), Some(d), Some(ab), Some(std::cell::RefCell::new(o))),
            Err(e) => {
                wall_out.push((
                    "floor".to_string(),
                    Outcome::Unsupported { reason: e.clone() },
                ));
                cpu_out.push(("floor".to_string(), Outcome::Unsupported { reason: e }));
                (None, None, None, None)
            }
        };
        let page_out = std::cell::RefCell::new(vec![0u8; 4 * n]);
        // Diagnostic variants (n == 1 only): registered instead of cuMemHostAlloc memory,
        // and vyre-cuda's packed copy sizes (516 bytes up, 20 down).
        let registered = (n == 1 && cpu).then(|| -> R<(Registered, Registered)> {
            let mut ab = Registered::new(8)?;
            ab.as_mut_slice()[..4].copy_from_slice(a);
            ab.as_mut_slice()[4..].copy_from_slice(b);
            Ok((ab, Registered::new(4)?))
        });
        let (reg_ab, reg_out) = match registered {
            Some(Ok((ab, out))) => (Some(ab), Some(std::cell::RefCell::new(out))),
            _ => (None, None),
        };
        let wide = (n == 1 && cpu).then(|| -> R<(Pinned, DevBuf, Pinned)> {
            let mut packed = Pinned::new(516)?;
            packed.as_mut_slice().fill(0);
            packed.as_mut_slice()[..4].copy_from_slice(a);
            packed.as_mut_slice()[256..260].copy_from_slice(b);
            Ok((packed, DevBuf::new(1024)?, Pinned::new(20)?))
        });
        let (wide_in, wide_dev, wide_out) = match wide {
            Some(Ok((p, d, o))) => (Some(p), Some(d), Some(std::cell::RefCell::new(o))),
            _ => (None, None, None),
        };
        let outs: Vec<std::cell::RefCell<Vec<Vec<u8>>>> = (0..2)
            .map(|_| std::cell::RefCell::new(Vec::new()))
            .collect();
        // (name, job, check) — the check reads the job's output after one run.
        let mut jobs: Vec<(String, Job<'_>, Check<'_>)> = Vec::new();
        if let (Some(floor), Some(dev), Some(ab), Some(out)) = (floor, &dev, &ab, &out) {
            jobs.push((
                "floor".into(),
                Box::new(move || {
                    floor.tiny_e2e(ab.as_slice(), out.borrow_mut().as_mut_slice(), dev)
                }),
                Box::new(move || expect.check_one(out.borrow().as_slice())),
            ));
            if cpu {
                if let (Some(reg_ab), Some(reg_out)) = (&reg_ab, &reg_out) {
                    jobs.push((
                        "floor/registered_host".into(),
                        Box::new(move || {
                            floor.tiny_e2e(
                                reg_ab.as_slice(),
                                reg_out.borrow_mut().as_mut_slice(),
                                dev,
                            )
                        }),
                        Box::new(move || expect.check_one(reg_out.borrow().as_slice())),
                    ));
                }
                if let (Some(wide_in), Some(wide_dev), Some(wide_out)) =
                    (&wide_in, &wide_dev, &wide_out)
                {
                    jobs.push((
                        "floor/packed_copy_sizes".into(),
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
                jobs.push((
                    "floor/pageable_two_uploads".into(),
                    Box::new(|| floor.tiny_pageable(a, b, &mut page_out.borrow_mut(), dev)),
                    Box::new(|| expect.check_one(&page_out.borrow())),
                ));
                jobs.push((
                    "floor/launch_sync_only".into(),
                    Box::new(move || floor.launch_sync(dev)),
                    Box::new(|| Ok(())),
                ));
                jobs.push((
                    "floor/blocking_event_wait".into(),
                    Box::new(move || {
                        floor.tiny_e2e_blocking(ab.as_slice(), out.borrow_mut().as_mut_slice(), dev)
                    }),
                    Box::new(move || expect.check_one(out.borrow().as_slice())),
                ));
            }
        }
        for (k, e) in [Eng::Ours, Eng::Inc].into_iter().enumerate() {
            let slot = &outs[k];
            jobs.push((
                e.name().into(),
                Box::new(move || self.dispatch(e, program, &inputs, &mut slot.borrow_mut())),
                Box::new(move || expect.check(&slot.borrow())),
            ));
        }
        // Check every job once.
        let mut active: Vec<bool> = Vec::new();
        for (name, job, check) in jobs.iter_mut() {
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
                    self_log_skip(name, &v);
                }
            }
        }
        // Warm up, then sample round-robin: wall, then thread CPU.
        let mut run = |clock_cpu: bool, count: usize| -> Vec<R<Vec<f64>>> {
            let mut taken: Vec<R<Vec<f64>>> =
                jobs.iter().map(|_| Ok(Vec::with_capacity(count))).collect();
            for _ in 0..count {
                for (j, (_, job, _)) in jobs.iter_mut().enumerate() {
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
        };
        let _ = run(false, 50);
        let wall = run(false, samples);
        let p0 = cpu::process();
        let thread_cpu = if cpu { run(true, samples) } else { Vec::new() };
        let process_per_round = (cpu::process() - p0).as_secs_f64() * 1e9 / samples.max(1) as f64;
        let mut floor_extra = BTreeMap::new();
        let mut floor_cpu_extra = BTreeMap::new();
        for (j, (name, _, _)) in jobs.iter().enumerate() {
            if !active[j] {
                continue;
            }
            let w = match &wall[j] {
                Ok(v) => Ok(Stats::from_ns(&mut v.clone())),
                Err(e) => Err(e.clone()),
            };
            let c = thread_cpu.get(j).map(|r| match r {
                Ok(v) => Ok(Stats::from_ns(&mut v.clone())),
                Err(e) => Err(e.clone()),
            });
            if let Some(variant) = name.strip_prefix("floor/") {
                if let Ok(st) = &w {
                    floor_extra.insert(format!("{variant}_median_ns"), st.median_ns);
                }
                if let Some(Ok(st)) = &c {
                    floor_cpu_extra.insert(format!("{variant}_thread_cpu_median_ns"), st.median_ns);
                }
                continue;
            }
            wall_out.push((
                name.clone(),
                match w {
                    Ok(st) => Outcome::ok(st),
                    Err(e) => Outcome::Fail {
                        reason: format!("error while timing: {e}"),
                    },
                },
            ));
            if let Some(c) = c {
                cpu_out.push((
                    name.clone(),
                    match c {
                        Ok(st) => Outcome::ok(st),
                        Err(e) => Outcome::Fail {
                            reason: format!("error while timing: {e}"),
                        },
                    },
                ));
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
        drop(jobs);
        (wall_out, cpu_out)
    }

    /// `vadd_u32_2^k` and `saxpy_f32_2^24`: borrowed pageable inputs, end to end.
    fn elementwise_e2e(&mut self, id: &str, kernel: Kernel, n: usize) {
        let mut rng = Rng::new(n as u64 ^ 0x5eed);
        let (a, b) = match kernel {
            Kernel::Vadd => (rng.u32_bytes(n), rng.u32_bytes(n)),
            Kernel::Saxpy => (rng.f32_bytes(n), rng.f32_bytes(n)),
        };
        let make = |m: u32| match kernel {
            Kernel::Vadd => programs::vadd(m, SALT),
            Kernel::Saxpy => programs::saxpy(m),
        };
        let program = make(n as u32);
        let inputs = [a.as_slice(), b.as_slice()];
        let expect = match expect_elementwise(&make, n, &inputs) {
            Ok(x) => x,
            Err(e) => return self.log(format!("{id}: reference failed: {e}")),
        };
        let samples = if n >= 1 << 24 {
            self.samples(30)
        } else {
            self.samples(100)
        };
        let warm = if n >= 1 << 24 { 3 } else { 10 };
        let mut row = Row::new(
            id,
            "end to end wall (pageable Vec inputs/outputs)",
            Some((n * 12) as f64),
        );
        let floor = (|| -> R<Outcome> {
            let floor = self.floor_or()?;
            let dev = [
                DevBuf::new(n * 4)?,
                DevBuf::new(n * 4)?,
                DevBuf::new(n * 4)?,
            ];
            let mut pa = Pinned::new(n * 4)?;
            let mut pb = Pinned::new(n * 4)?;
            let mut pout = Pinned::new(n * 4)?;
            pa.as_mut_slice().copy_from_slice(&a);
            pb.as_mut_slice().copy_from_slice(&b);
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
            let stats = measure(warm, samples, self.budget, || {
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
            let pageable = measure(1, samples.min(10), self.budget, || {
                timed(|| floor.elementwise_e2e(kernel, &a, &b, &mut out, &dev, chunk))
            })?;
            let mut extra = BTreeMap::new();
            extra.insert("pageable_median_ns".into(), pageable.median_ns);
            Ok(Outcome::Ok {
                stats,
                extra,
                note: Some("pinned inputs/outputs, 4 MiB chunks over 4 streams (copies overlap kernels); extra.pageable_median_ns: the same from the pageable Vecs".into()),
            })
        })();
        row.engines.insert(
            "floor".into(),
            floor.unwrap_or_else(|e| Outcome::Unsupported { reason: e }),
        );
        for e in [Eng::Ours, Eng::Inc] {
            let o = self.backend_e2e(e, &program, &inputs, &expect, warm, samples);
            row.engines.insert(e.name().into(), o);
        }
        // The chunked pipeline (inputs of 32 MiB and more) does not use the staging lanes.
        if n * 8 < 32 << 20 && n >= 1 << 16 {
            let sweep = self.staging_sweep(&program, &inputs, &expect, samples.min(30));
            self.attach_sweep(&mut row, sweep);
        }
        row.notes.push(expect.describe());
        self.push(row);
    }

    /// `jit_probe` (only when named): wall time of the driver's JIT by method on each
    /// engine's PTX. Every text gets a unique unused `.global` so no JIT cache entry hits.
    fn jit_probe(&mut self) {
        let Some(floor) = self.floor.as_ref() else {
            return self.log("jit_probe: the floor could not open the device".into());
        };
        let (major, minor) = floor.facts.compute_capability;
        let sm = major as u32 * 10 + minor as u32;
        let config = self.config.clone();
        let ours_text = |program: &Program| -> Option<String> {
            // What a dispatch JIT-compiles: the vector entry is a module of its own.
            Some(self.ours.as_ref()?.emit(program, &config).ok()?.ptx)
        };
        let inc_text = |program: &Program| {
            vyre_driver_cuda::codegen::program_to_ptx_for_sm(program, &config, sm).ok()
        };
        let mut sets: Vec<(&str, &str, Vec<String>)> = Vec::new();
        let vadd = |k: u32| programs::vadd(1024, 0x5100_0000 + k);
        sets.push((
            "floor",
            "vadd",
            vec![ptx::cold_module(major, minor, 0x5100_0000)],
        ));
        sets.push((
            "vyre-cuda",
            "vadd",
            ours_text(&vadd(1)).into_iter().collect(),
        ));
        sets.push((
            "incumbent",
            "vadd",
            inc_text(&vadd(2)).into_iter().collect(),
        ));
        let programs: Vec<Program> = corpus().iter().map(|f| (f.build)()).collect();
        let (mut ours_corpus, mut inc_corpus) = (Vec::new(), Vec::new());
        for program in &programs {
            // Only programs both engines emit, so the sums compare like with like.
            if let (Some(a), Some(b)) = (ours_text(program), inc_text(program)) {
                ours_corpus.push(a);
                inc_corpus.push(b);
            }
        }
        sets.push(("vyre-cuda", "corpus", ours_corpus));
        sets.push(("incumbent", "corpus", inc_corpus));
        let salt = std::process::id() as u64 * 1_000_000;
        let mut serial = 0u64;
        let mut m = BTreeMap::new();
        for (engine, set, texts) in &sets {
            let (methods, reps): (&[(&str, Jit)], usize) = if *set == "vadd" {
                (
                    &[
                        ("load", Jit::Load),
                        ("O0", Jit::Level(0)),
                        ("O1", Jit::Level(1)),
                        ("O3", Jit::Level(3)),
                        ("link", Jit::Linked(4)),
                        ("link-O0", Jit::Linked(0)),
                    ],
                    7,
                )
            } else {
                (
                    &[
                        ("load", Jit::Load),
                        ("O0", Jit::Level(0)),
                        ("link", Jit::Linked(4)),
                    ],
                    1,
                )
            };
            let mut bytes: Vec<f64> = texts.iter().map(|t| t.len() as f64).collect();
            if bytes.is_empty() {
                continue;
            }
            m.insert(format!("{engine}.{set}.programs"), bytes.len() as f64);
            m.insert(
                format!("{engine}.{set}.ptx_bytes.median"),
                Stats::from_ns(&mut bytes).median_ns,
            );
            for &(method, how) in methods {
                let mut times = Vec::new();
                for text in texts {
                    for _ in 0..reps {
                        serial += 1;
                        let salted = match text.find(".address_size 64\n") {
                            Some(at) => {
                                let end = at + ".address_size 64\n".len();
                                format!(
                                    "{}.global .u32 vyre_probe_salt_{};\n{}",
                                    &text[..end],
                                    salt + serial,
                                    &text[end..]
                                )
                            }
                            None => text.clone(),
                        };
                        match floor.jit_time(&salted, how) {
                            Ok(d) => times.push(d.as_secs_f64() * 1e9),
                            Err(e) => {
                                m.insert(format!("{engine}.{set}.{method}.error: {e}"), 0.0);
                            }
                        }
                    }
                }
                if times.is_empty() {
                    continue;
                }
                let sum: f64 = times.iter().sum();
                m.insert(format!("{engine}.{set}.{method}.sum_ns"), sum);
                m.insert(
                    format!("{engine}.{set}.{method}.median_ns"),
                    Stats::from_ns(&mut times).median_ns,
                );
            }
        }
        for (k, v) in &m {
            self.log(format!("jit_probe {k} = {v:.0}"));
        }
        self.report
            .diagnostics
            .insert("jit_probe: driver JIT by method".into(), m);
        self.save();
    }

    /// `resident_vadd_2^k`: kernel time over resident buffers (device events).
    fn resident_vadd(&mut self, id: &str, n: usize) {
        let mut rng = Rng::new(n as u64 ^ 0x7e5);
        let (a, b) = (rng.u32_bytes(n), rng.u32_bytes(n));
        let make = |m: u32| programs::vadd(m, SALT);
        let program = make(n as u32);
        let inputs = [a.as_slice(), b.as_slice()];
        let expect = match expect_elementwise(&make, n, &inputs) {
            Ok(x) => x,
            Err(e) => return self.log(format!("{id}: reference failed: {e}")),
        };
        let (warm, samples) = (5, self.samples(50));
        let mut row = Row::new(
            id,
            "kernel time (device events), resident buffers",
            Some((n * 12) as f64),
        );
        let floor = (|| -> R<Outcome> {
            let floor = self.floor_or()?;
            let dev = [
                DevBuf::new(n * 4)?,
                DevBuf::new(n * 4)?,
                DevBuf::new(n * 4)?,
            ];
            floor.upload(&dev[0], &a)?;
            floor.upload(&dev[1], &b)?;
            floor.elementwise_kernel_time(Kernel::Vadd, &dev, n as u32)?;
            let mut out = vec![0u8; n * 4];
            floor.download(&mut out, &dev[2])?;
            if let Err(why) = expect.check_one(&out) {
                return Ok(Outcome::Fail { reason: why });
            }
            Ok(Outcome::ok(measure(warm, samples, self.budget, || {
                floor.elementwise_kernel_time(Kernel::Vadd, &dev, n as u32)
            })?))
        })();
        row.engines.insert(
            "floor".into(),
            floor.unwrap_or_else(|e| Outcome::Unsupported { reason: e }),
        );
        for e in [Eng::Ours, Eng::Inc] {
            let o = match self.backend(e) {
                Some(backend) => resident_kernel_time(
                    backend,
                    &program,
                    n,
                    &a,
                    &b,
                    &expect,
                    warm,
                    samples,
                    self.budget,
                ),
                None => Outcome::Unsupported {
                    reason: "engine not available".into(),
                },
            };
            row.engines.insert(e.name().into(), o);
        }
        row.notes.push(expect.describe());
        row.notes.push("backends: VyreBackend::dispatch_resident_timed device_ns (falls back to wall_ns, flagged, when a backend reports no device time)".into());
        self.push(row);
    }

    /// `resident_sequence_100`: 100 dependent small steps on a resident buffer, one readback.
    /// `small_dispatch_threshold` (diagnostics only): warm end-to-end vadd at sizes around
    /// vyre-cuda's packed small-dispatch arena, once through a backend whose packed path
    /// takes everything up to 256 KiB and once through one with it disabled, samples
    /// interleaved. Where the packed path stops winning is where its default belongs.
    fn small_dispatch_threshold(&mut self) {
        let open = |bytes: usize| open_ours(|options| options.small_dispatch_bytes = bytes);
        let (packed, general) = match (open(256 << 10), open(0)) {
            (Ok(p), Ok(g)) => (p, g),
            (Err(e), _) | (_, Err(e)) => return self.log(format!("small_dispatch_threshold: {e}")),
        };
        let mut diag = BTreeMap::new();
        for n in [1usize, 1024, 2048, 4096, 8192, 12288, 16384] {
            let program = programs::vadd(n as u32, SALT);
            let mut rng = Rng::new(n as u64 + 7);
            let (a, b) = (rng.u32_bytes(n), rng.u32_bytes(n));
            let inputs = [a.as_slice(), b.as_slice()];
            let want = match programs::reference(&program, &inputs) {
                Ok(w) => w,
                Err(e) => return self.log(format!("small_dispatch_threshold: reference: {e}")),
            };
            let mut outs = [Vec::new(), Vec::new()];
            let engines = [&packed, &general];
            let mut samples: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            let rounds = self.samples(400);
            for round in 0..rounds + 30 {
                for (k, engine) in engines.iter().enumerate() {
                    let t = Instant::now();
                    if let Err(e) =
                        engine.dispatch_borrowed_into(&program, &inputs, &self.config, &mut outs[k])
                    {
                        return self.log(format!("small_dispatch_threshold n={n}: {e}"));
                    }
                    if round >= 30 {
                        samples[k].push(t.elapsed().as_secs_f64() * 1e9);
                    }
                }
            }
            // The same in blocks (100 of one engine, then 100 of the other, four times): no
            // engine runs right after the other.
            let mut blocked: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            for _ in 0..4 {
                for (k, engine) in engines.iter().enumerate() {
                    for sample in 0..110 {
                        let t = Instant::now();
                        if let Err(e) = engine.dispatch_borrowed_into(
                            &program,
                            &inputs,
                            &self.config,
                            &mut outs[k],
                        ) {
                            return self.log(format!("small_dispatch_threshold n={n}: {e}"));
                        }
                        if sample >= 10 {
                            blocked[k].push(t.elapsed().as_secs_f64() * 1e9);
                        }
                    }
                }
            }
            let [bp, bg] = blocked.map(|mut v| Stats::from_ns(&mut v).median_ns);
            diag.insert(format!("n{n}_packed_blocked_median_ns"), bp);
            diag.insert(format!("n{n}_general_blocked_median_ns"), bg);
            self.log(format!(
                "small_dispatch_threshold: vadd n={n} in blocks: packed {:.2} us, general {:.2} us, packed/general {:.3}",
                bp / 1e3,
                bg / 1e3,
                bp / bg
            ));
            if outs[0] != want || outs[1] != want {
                return self.log(format!(
                    "small_dispatch_threshold n={n}: output differs from the reference"
                ));
            }
            let arena = 3 * (4 * n).next_multiple_of(256) + 256;
            let [p, g] = samples.map(|mut v| Stats::from_ns(&mut v).median_ns);
            self.log(format!(
                "small_dispatch_threshold: vadd n={n} (arena {arena} B): packed {:.2} us, general {:.2} us, packed/general {:.3}",
                p / 1e3,
                g / 1e3,
                p / g
            ));
            diag.insert(format!("n{n}_arena_bytes"), arena as f64);
            diag.insert(format!("n{n}_packed_median_ns"), p);
            diag.insert(format!("n{n}_general_median_ns"), g);
        }
        self.report
            .diagnostics
            .insert("small_dispatch_threshold".into(), diag);
        self.save();
    }

    fn resident_sequence(&mut self) {
        let n = 4096usize;
        let steps = 100usize;
        let program = programs::step(n as u32);
        let x0 = Rng::new(99).u32_bytes(n);
        // The reference, step by step.
        let mut want = x0.clone();
        for _ in 0..steps {
            match programs::reference(&program, &[want.as_slice()]) {
                Ok(mut out) if out.len() == 1 => want = out.remove(0),
                Ok(out) => {
                    return self.log(format!(
                        "sequence: reference returned {} outputs",
                        out.len()
                    ))
                }
                Err(e) => return self.log(format!("sequence: reference failed: {e}")),
            }
        }
        let expect = Expect::Full(vec![want]);
        let (warm, samples) = (5, self.samples(100));
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
        let floor = (|| -> R<Outcome> {
            let floor = self.floor_or()?;
            let x = DevBuf::new(n * 4)?;
            let mut out = Pinned::new(n * 4)?;
            floor.upload(&x, &x0)?;
            let graph = floor.capture_sequence(&x, n as u32, steps)?;
            floor.replay(&graph, &x, out.as_mut_slice())?;
            if let Err(why) = expect.check_one(out.as_slice()) {
                return Ok(Outcome::Fail { reason: why });
            }
            let stats = measure(warm, samples, self.budget, || {
                timed(|| floor.replay(&graph, &x, out.as_mut_slice()))
            })?;
            let plain = measure(warm, samples, self.budget, || {
                timed(|| floor.sequence(&x, n as u32, steps, out.as_mut_slice()))
            })?;
            let mut extra = BTreeMap::new();
            extra.insert(
                "plain_launches_per_step_ns".into(),
                plain.median_ns / steps as f64,
            );
            Ok(Outcome::Ok {
                stats: per_step(stats),
                extra,
                note: Some("CUDA graph of 100 launches replayed, pinned readback; extra: 100 plain launches instead".into()),
            })
        })();
        row.engines.insert(
            "floor".into(),
            floor.unwrap_or_else(|e| Outcome::Unsupported { reason: e }),
        );
        for e in [Eng::Ours, Eng::Inc] {
            let o = match self.backend(e) {
                Some(backend) => resident_sequence(
                    backend,
                    &program,
                    n,
                    steps,
                    &x0,
                    &expect,
                    warm,
                    samples,
                    self.budget,
                )
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
            row.engines.insert(e.name().into(), o);
        }
        row.notes.push("backends: VyreBackend::dispatch_resident_sequence_read_ranges_into with 100 steps and one read range; extra.repeated_api_per_step_ns: dispatch_resident_repeated_sequence_read_ranges_into (1 step x 100)".into());
        self.push(row);
    }

    /// `reduce_atomic_2^24`: sum 2^24 u32 into one slot with `Expr::Atomic` Add, end to end.
    fn reduce_atomic(&mut self) {
        let n = if self.opts.quick {
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
            Err(e) => return self.log(format!("{id}: reference failed: {e}")),
        };
        self.log(format!(
            "{id}: vyre-reference took {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        let (warm, samples) = (3, self.samples(30));
        let mut row = Row::new(
            id,
            "end to end wall (pageable Vec input)",
            Some((n * 4) as f64),
        );
        let floor = (|| -> R<Outcome> {
            let floor = self.floor_or()?;
            let dev_a = DevBuf::new(n * 4)?;
            let dev_out = DevBuf::new(256)?;
            let mut pa = Pinned::new(n * 4)?;
            pa.as_mut_slice().copy_from_slice(&a);
            let mut out = Pinned::new(4)?;
            let chunk = 1 << 20;
            floor.reduce_e2e(pa.as_slice(), out.as_mut_slice(), &dev_a, &dev_out, chunk)?;
            if let Err(why) = expect.check_one(out.as_slice()) {
                return Ok(Outcome::Fail { reason: why });
            }
            let stats = measure(warm, samples, self.budget, || {
                timed(|| {
                    floor.reduce_e2e(pa.as_slice(), out.as_mut_slice(), &dev_a, &dev_out, chunk)
                })
            })?;
            Ok(Outcome::Ok {
                stats,
                extra: BTreeMap::new(),
                note: Some("pinned input, 4 MiB chunks over 4 streams, warp-shuffle + shared-memory block reduction, one atom.add per block".into()),
            })
        })();
        row.engines.insert(
            "floor".into(),
            floor.unwrap_or_else(|e| Outcome::Unsupported { reason: e }),
        );
        for e in [Eng::Ours, Eng::Inc] {
            let o = self.backend_e2e(e, &program, &inputs, &expect, warm, samples);
            row.engines.insert(e.name().into(), o);
        }
        let sweep = self.staging_sweep(&program, &inputs, &expect, samples);
        self.attach_sweep(&mut row, sweep);
        row.notes.push(format!("n = {n}; checked in full against vyre-reference (one atomic per element in the reference)"));
        self.push(row);
    }

    /// `cold_compile`: first dispatch of a program no cache has seen (a fresh literal).
    fn cold_compile(&mut self) {
        let n = 1024usize;
        let samples = self.samples(30);
        let mut rng = Rng::new(3);
        let (a, b) = (rng.u32_bytes(n), rng.u32_bytes(n));
        let inputs = [a.as_slice(), b.as_slice()];
        // Literals differ between engines, samples and runs.
        let run_salt = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            % 1_000_000) as u32
            * 64;
        let salt = |engine: u32, k: usize| {
            0x4000_0000u32 ^ run_salt.wrapping_add(engine * 10_000 + k as u32 + 11)
        };
        let expect_for = |s: u32| -> R<Expect> {
            Ok(Expect::Full(programs::reference(
                &programs::vadd(n as u32, s),
                &inputs,
            )?))
        };
        let mut row = Row::new(
            "cold_compile",
            "first dispatch of a new program (1024 elements), end to end",
            None,
        );
        let floor = (|| -> R<Outcome> {
            let floor = self.floor_or()?;
            let (major, minor) = floor.facts.compute_capability;
            let dev = DevBuf::new(Floor::tiny_bytes(n))?;
            let mut ab = Pinned::new(8 * n)?;
            ab.as_mut_slice()[..4 * n].copy_from_slice(&a);
            ab.as_mut_slice()[4 * n..].copy_from_slice(&b);
            let mut out = Pinned::new(4 * n)?;
            let mut taken = Vec::new();
            for k in 0..samples {
                let s = salt(0, k);
                let text = ptx::cold_module(major, minor, s);
                taken.push(floor.cold_vadd(&text, ab.as_slice(), out.as_mut_slice(), &dev)?);
                if let Err(why) = expect_for(s)?.check_one(out.as_slice()) {
                    return Ok(Outcome::Fail { reason: why });
                }
            }
            Ok(Outcome::Ok {
                stats: Stats::from_durations(&taken),
                extra: BTreeMap::new(),
                note: Some(
                    "cuModuleLoadData of a 1-kernel hand-written PTX + launch + pinned copies"
                        .into(),
                ),
            })
        })();
        row.engines.insert(
            "floor".into(),
            floor.unwrap_or_else(|e| Outcome::Unsupported { reason: e }),
        );
        for (ei, e) in [(1u32, Eng::Ours), (2u32, Eng::Inc)] {
            let mut taken = Vec::new();
            let mut outcome = None;
            let mut out = Vec::new();
            for k in 0..samples {
                let s = salt(ei, k);
                let program = programs::vadd(n as u32, s);
                match timed(|| self.dispatch(e, &program, &inputs, &mut out)) {
                    Ok(t) => taken.push(t),
                    Err(err) => {
                        outcome = Some(if k == 0 {
                            Outcome::Unsupported { reason: err }
                        } else {
                            Outcome::Fail {
                                reason: format!("sample {k}: {err}"),
                            }
                        });
                        break;
                    }
                }
                match expect_for(s) {
                    Ok(x) => {
                        if let Err(why) = x.check(&out) {
                            outcome = Some(Outcome::Fail { reason: why });
                            break;
                        }
                    }
                    Err(err) => {
                        outcome = Some(Outcome::Unsupported {
                            reason: format!("reference: {err}"),
                        });
                        break;
                    }
                }
            }
            let o = outcome.unwrap_or_else(|| Outcome::ok(Stats::from_durations(&taken)));
            row.engines.insert(e.name().into(), o);
        }
        row.notes.push("each sample is a distinct program (fresh u32 literal); every output checked in full against vyre-reference".into());
        self.push(row);
    }

    /// `emit_ptx_corpus`: PTX generation time per corpus program (host CPU, no GPU).
    fn emit_corpus(&mut self) {
        let programs: Vec<(&'static str, Program)> =
            corpus().iter().map(|f| (f.id, (f.build)())).collect();
        let target = self
            .ours
            .as_ref()
            .map(|o| o.target())
            .unwrap_or_else(vyre_cuda::codegen::PtxTarget::sm90);
        let sm = self
            .floor
            .as_ref()
            .map(|f| {
                let (a, b) = f.facts.compute_capability;
                (a * 10 + b) as u32
            })
            .unwrap_or(90);
        let per_program = |f: &dyn Fn(&Program) -> bool| -> (Vec<f64>, usize) {
            let mut times = Vec::new();
            let mut rejected = 0;
            for (_, p) in &programs {
                let mut runs = Vec::new();
                let mut ok = true;
                for _ in 0..5 {
                    let started = Instant::now();
                    ok = f(p);
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
        };
        let config = self.config.clone();
        let (mut ours, ours_rej) =
            per_program(&|p| vyre_cuda::codegen::emit_ptx(p, config.workgroup_override, target).is_ok());
        let (mut inc, inc_rej) = per_program(&|p| {
            vyre_driver_cuda::codegen::program_to_ptx_for_sm(p, &config, sm).is_ok()
        });
        let mut row = Row::new(
            "emit_ptx_corpus",
            "PTX generation per corpus program (host CPU; median over programs)",
            None,
        );
        row.engines.insert(
            "floor".into(),
            Outcome::Unsupported {
                reason: "hand-written PTX: no emitter".into(),
            },
        );
        let mk = |times: &mut Vec<f64>, rejected: usize| {
            let mut extra = BTreeMap::new();
            extra.insert("programs_emitted".into(), times.len() as f64);
            extra.insert("programs_rejected".into(), rejected as f64);
            Outcome::Ok {
                stats: Stats::from_ns(times),
                extra,
                note: None,
            }
        };
        row.engines
            .insert("vyre-cuda".into(), mk(&mut ours, ours_rej));
        row.engines
            .insert("incumbent".into(), mk(&mut inc, inc_rej));
        row.notes.push(format!(
            "{} programs (vyre-primitives + vyre-intrinsics); each program's time is the median of 5 runs; \
             vyre-cuda: codegen::emit_ptx for {target}; incumbent: codegen::program_to_ptx_for_sm(.., {sm}) (vyre-lower + vyre-emit-ptx)",
            programs.len()
        ));
        self.push(row);
    }

    /// `corpus_first` and `corpus_warm`: every fixture case of both corpora, end to end.
    fn corpus(&mut self) {
        let fixtures = corpus();
        struct Case {
            program: usize,
            inputs: Vec<Vec<u8>>,
            want: Result<Vec<Vec<u8>>, String>,
        }
        let programs: Vec<Program> = fixtures.iter().map(|f| (f.build)()).collect();
        let mut cases = Vec::new();
        for (pi, f) in fixtures.iter().enumerate() {
            if let Some(inputs) = f.inputs {
                for case in inputs() {
                    let borrowed: Vec<&[u8]> = case.iter().map(Vec::as_slice).collect();
                    let want = programs::reference(&programs[pi], &borrowed);
                    cases.push(Case {
                        program: pi,
                        inputs: case,
                        want,
                    });
                }
            }
        }
        let engines = [Eng::Ours, Eng::Inc];
        // status per engine per case: 0 match, 1 mismatch, 2 rejected (engine error, reference ok), 3 both fail
        let mut status = vec![vec![0u8; cases.len()]; engines.len()];
        let mut first = vec![vec![0f64; cases.len()]; engines.len()];
        let mut out = Vec::new();
        for (ei, &e) in engines.iter().enumerate() {
            for (ci, case) in cases.iter().enumerate() {
                let borrowed: Vec<&[u8]> = case.inputs.iter().map(Vec::as_slice).collect();
                let started = Instant::now();
                let got = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    self.dispatch(e, &programs[case.program], &borrowed, &mut out)
                }))
                .unwrap_or_else(|_| Err("panicked".into()));
                first[ei][ci] = started.elapsed().as_secs_f64() * 1e9;
                status[ei][ci] = match (&case.want, got) {
                    (Ok(want), Ok(())) => {
                        if Expect::Full(want.clone()).check(&out).is_ok() {
                            0
                        } else {
                            1
                        }
                    }
                    (Ok(_), Err(_)) => 2,
                    (Err(_), Err(_)) => 3,
                    (Err(_), Ok(())) => 1,
                };
            }
        }
        let common: Vec<usize> = (0..cases.len())
            .filter(|&ci| {
                engines
                    .iter()
                    .enumerate()
                    .all(|(ei, _)| status[ei][ci] == 0)
            })
            .collect();
        let passes = self.samples(30);
        let mut warm = vec![vec![vec![0f64; passes]; cases.len()]; engines.len()];
        #[allow(clippy::needless_range_loop)]
        for pass in 0..passes {
            for (ei, &e) in engines.iter().enumerate() {
                for (ci, case) in cases.iter().enumerate() {
                    if status[ei][ci] != 0 {
                        continue;
                    }
                    let borrowed: Vec<&[u8]> = case.inputs.iter().map(Vec::as_slice).collect();
                    let started = Instant::now();
                    let _ = self.dispatch(e, &programs[case.program], &borrowed, &mut out);
                    warm[ei][ci][pass] = started.elapsed().as_secs_f64() * 1e9;
                }
            }
        }
        // Where the first pass goes: the common cases vyre-cuda spends longest on.
        let mut slowest: Vec<usize> = common.clone();
        slowest.sort_by(|&x, &y| first[0][y].total_cmp(&first[0][x]));
        for &ci in slowest.iter().take(12) {
            self.log(format!(
                "corpus_first case {}: vyre-cuda {} | incumbent {}",
                fixtures[cases[ci].program].id,
                fmt_time(first[0][ci]),
                fmt_time(first[1][ci])
            ));
        }
        let mut first_row = Row::new(
            "corpus_first",
            "first pass over the fixture corpus (compiles included), sum of wall, common cases",
            None,
        );
        let mut warm_row = Row::new(
            "corpus_warm",
            "warm pass over the fixture corpus, sum of wall, common cases",
            None,
        );
        for row in [&mut first_row, &mut warm_row] {
            row.engines.insert(
                "floor".into(),
                Outcome::Unsupported {
                    reason: "no hand-written kernels for the fixture corpus".into(),
                },
            );
        }
        for (ei, &e) in engines.iter().enumerate() {
            let count = |s: u8| status[ei].iter().filter(|&&x| x == s).count() as f64;
            let mut extra = BTreeMap::new();
            extra.insert("cases".into(), cases.len() as f64);
            extra.insert("matched".into(), count(0));
            extra.insert("mismatched".into(), count(1));
            extra.insert("rejected".into(), count(2));
            extra.insert("both_fail".into(), count(3));
            extra.insert("common_cases".into(), common.len() as f64);
            let own: Vec<usize> = (0..cases.len()).filter(|&ci| status[ei][ci] == 0).collect();
            let mut own_sums: Vec<f64> = (0..passes)
                .map(|p| own.iter().map(|&ci| warm[ei][ci][p]).sum())
                .collect();
            extra.insert(
                "own_matched_warm_median_ns".into(),
                Stats::from_ns(&mut own_sums).median_ns,
            );
            let first_sum: f64 = common.iter().map(|&ci| first[ei][ci]).sum();
            let mut sums: Vec<f64> = (0..passes)
                .map(|p| common.iter().map(|&ci| warm[ei][ci][p]).sum())
                .collect();
            let mismatches: Vec<String> = (0..cases.len())
                .filter(|&ci| status[ei][ci] == 1 || status[ei][ci] == 2)
                .map(|ci| {
                    format!(
                        "{}{}",
                        fixtures[cases[ci].program].id,
                        if status[ei][ci] == 1 {
                            " (mismatch)"
                        } else {
                            " (rejected)"
                        }
                    )
                })
                .collect();
            let note = if mismatches.is_empty() {
                None
            } else {
                let mut m = mismatches.clone();
                m.dedup();
                Some(format!("not matched: {}", m.join(", ")))
            };
            first_row.engines.insert(
                e.name().into(),
                Outcome::Ok {
                    stats: Stats::from_ns(&mut [first_sum]),
                    extra: extra.clone(),
                    note: note.clone(),
                },
            );
            warm_row.engines.insert(
                e.name().into(),
                Outcome::Ok {
                    stats: Stats::from_ns(&mut sums),
                    extra,
                    note,
                },
            );
        }
        let summary = engines
            .iter()
            .enumerate()
            .map(|(ei, e)| {
                let c = |s: u8| status[ei].iter().filter(|&&x| x == s).count();
                format!(
                    "{}: {} matched, {} mismatched, {} rejected, {} failing like the reference",
                    e.name(),
                    c(0),
                    c(1),
                    c(2),
                    c(3)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        for row in [&mut first_row, &mut warm_row] {
            row.notes.push(format!(
                "{} cases from {} programs; sums over the {} cases every engine matched; {summary}",
                cases.len(),
                fixtures.len(),
                common.len()
            ));
        }
        first_row
            .notes
            .push("one sample: the first pass is the only cold one".into());
        self.push(first_row);
        self.push(warm_row);
    }

    /// Where the time goes: per-dispatch metric deltas and phase times of both backends,
    /// raw transfer rates, JIT time of each engine's PTX.
    fn diagnostics(&mut self) {
        let mut diag: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
        let mut errors = Vec::new();
        let mut jit_levels: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        // Phase times from dispatch_borrowed_timed, and metric deltas per dispatch.
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
            for e in [Eng::Ours, Eng::Inc] {
                let Some(backend) = self.backend(e) else {
                    continue;
                };
                let mut m = BTreeMap::new();
                let before = metrics(backend);
                let (mut wall, mut enq, mut wait, mut dev) = (vec![], vec![], vec![], vec![]);
                for _ in 0..reps {
                    match backend.dispatch_borrowed_timed(&program, inputs, &self.config) {
                        Ok(t) => {
                            wall.push(t.wall_ns as f64);
                            if let Some(x) = t.enqueue_ns {
                                enq.push(x as f64)
                            }
                            if let Some(x) = t.wait_ns {
                                wait.push(x as f64)
                            }
                            if let Some(x) = t.device_ns {
                                dev.push(x as f64)
                            }
                        }
                        Err(err) => {
                            errors.push(format!("diag {label} {}: {err}", e.name()));
                            break;
                        }
                    }
                }
                let after = metrics(backend);
                for (name, v) in [
                    ("wall_ns", &mut wall),
                    ("enqueue_ns", &mut enq),
                    ("wait_ns", &mut wait),
                    ("device_ns", &mut dev),
                ] {
                    if !v.is_empty() {
                        m.insert(format!("timed.{name}.median"), Stats::from_ns(v).median_ns);
                    }
                }
                for (name, v) in &after {
                    let d = v - before.get(name).copied().unwrap_or(0.0);
                    if d != 0.0 {
                        m.insert(format!("metric_per_dispatch.{name}"), d / reps as f64);
                    }
                }
                diag.insert(format!("{label}/{}", e.name()), m);
            }
        }
        // The resident sequence's own timing split (enqueue / wait / device).
        {
            let n = 4096usize;
            let program = programs::step(n as u32);
            let x0 = Rng::new(98).u32_bytes(n);
            for e in [Eng::Ours, Eng::Inc] {
                let Some(backend) = self.backend(e) else {
                    continue;
                };
                let mut m = BTreeMap::new();
                let r = (|| -> R<()> {
                    let x = backend
                        .allocate_resident(n * 4)
                        .map_err(|e| e.to_string())?;
                    backend
                        .upload_resident(&x, &x0)
                        .map_err(|e| e.to_string())?;
                    let resources = [x.clone()];
                    let list: Vec<ResidentDispatchStep<'_>> = (0..100)
                        .map(|_| ResidentDispatchStep {
                            program: &program,
                            resources: &resources,
                            grid_override: None,
                            workgroup_override: None,
                        })
                        .collect();
                    let ranges = [ResidentReadRange {
                        resource: &x,
                        byte_offset: 0,
                        byte_len: n * 4,
                    }];
                    let mut out = Vec::new();
                    let (mut wall, mut enq, mut wait, mut dev) = (vec![], vec![], vec![], vec![]);
                    for _ in 0..30 {
                        let t = backend
                            .dispatch_resident_sequence_read_ranges_timed_into(
                                &list,
                                &ranges,
                                &mut [&mut out],
                            )
                            .map_err(|e| e.to_string())?;
                        wall.push(t.wall_ns as f64);
                        if let Some(v) = t.enqueue_ns {
                            enq.push(v as f64)
                        }
                        if let Some(v) = t.wait_ns {
                            wait.push(v as f64)
                        }
                        if let Some(v) = t.device_ns {
                            dev.push(v as f64)
                        }
                    }
                    let _ = backend.free_resident(x);
                    for (name, v) in [
                        ("wall_ns", &mut wall),
                        ("enqueue_ns", &mut enq),
                        ("wait_ns", &mut wait),
                        ("device_ns", &mut dev),
                    ] {
                        if !v.is_empty() {
                            m.insert(
                                format!("sequence100.{name}.median"),
                                Stats::from_ns(v).median_ns,
                            );
                        }
                    }
                    Ok(())
                })();
                if let Err(err) = r {
                    m.insert(format!("error: {err}"), 0.0);
                }
                diag.insert(format!("resident_sequence_100/{}", e.name()), m);
            }
        }
        // Raw transfers through the floor.
        if let Some(floor) = &self.floor {
            let n = 64usize << 20; // 64 MiB... in bytes: 64 Mi
            let mut m = BTreeMap::new();
            let r = (|| -> R<()> {
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
            })();
            if let Err(e) = r {
                m.insert(format!("error: {e}"), 0.0);
            }
            diag.insert("transfers (64 MiB, floor)".into(), m);
            // JIT (cuModuleLoadData) time of each engine's PTX for a fresh 1024-element vadd.
            let mut m = BTreeMap::new();
            let (major, minor) = floor.facts.compute_capability;
            let sm = (major * 10 + minor) as u32;
            let mut jit = |name: &str, text: &dyn Fn(u32) -> R<String>| {
                let mut times = Vec::new();
                let mut gen = Vec::new();
                for k in 0..10u32 {
                    let s = 0x2000_0000 + k * 7 + (std::process::id() % 1000) * 100;
                    let started = Instant::now();
                    let t = match text(s) {
                        Ok(t) => t,
                        Err(e) => {
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
            };
            jit("floor", &|s| Ok(ptx::cold_module(major, minor, s)));
            let config = self.config.clone();
            if let Some(ours) = &self.ours {
                jit("vyre-cuda", &|s| {
                    ours.emit(&programs::vadd(1024, s), &config)
                        .map(|k| k.ptx)
                        .map_err(|e| e.to_string())
                });
            }
            jit("incumbent", &|s| {
                vyre_driver_cuda::codegen::program_to_ptx_for_sm(
                    &programs::vadd(1024, s),
                    &config,
                    sm,
                )
            });
            diag.insert(
                "cold: PTX generation and JIT of a fresh 1024-element vadd".into(),
                m,
            );
            // The driver JIT at each optimisation level, on each engine's PTX for a fresh
            // program (what a tiered compile could save on a cold dispatch).
            let mut m = BTreeMap::new();
            for level in 0..=4u32 {
                for k in 0..5u32 {
                    let s = 0x3000_0000 + level * 64 + k + (std::process::id() % 1000) * 1000;
                    let mut texts = vec![("floor", Some(ptx::cold_module(major, minor, s)))];
                    texts.push((
                        "vyre-cuda",
                        self.ours.as_ref().and_then(|o| {
                            o.emit(&programs::vadd(1024, s ^ 0x0100_0000), &config)
                                .ok()
                                .map(|k| k.ptx)
                        }),
                    ));
                    texts.push((
                        "incumbent",
                        vyre_driver_cuda::codegen::program_to_ptx_for_sm(
                            &programs::vadd(1024, s ^ 0x0200_0000),
                            &config,
                            sm,
                        )
                        .ok(),
                    ));
                    for (name, text) in texts {
                        let Some(text) = text else { continue };
                        let key = format!("{name}.O{level}.jit_ns");
                        match floor.jit_time(&text, Jit::Level(level)) {
                            Ok(d) => jit_levels
                                .entry(key)
                                .or_default()
                                .push(d.as_secs_f64() * 1e9),
                            Err(e) => {
                                m.insert(format!("{key}.error: {e}"), 0.0);
                            }
                        }
                    }
                }
            }
            for (key, mut v) in jit_levels {
                m.insert(format!("{key}.median"), Stats::from_ns(&mut v).median_ns);
            }
            diag.insert(
                "cold: driver JIT time by CU_JIT_OPTIMIZATION_LEVEL".into(),
                m,
            );
        }
        for line in errors {
            self.log(line);
        }
        for (k, v) in &diag {
            self.log(format!("diag {k}:"));
            for (name, x) in v {
                self.log(format!("    {name} = {x:.1}"));
            }
        }
        self.report.diagnostics.extend(diag);
        self.save();
    }
}

/// Outcomes by engine name.
type Named = Vec<(String, Outcome)>;

fn self_log_skip(name: &str, outcome: &Outcome) {
    println!("    {name}: {} ({outcome:?})", outcome.label());
}

fn metrics(backend: &dyn VyreBackend) -> BTreeMap<String, f64> {
    backend
        .backend_metric_snapshot()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v as f64))
        .collect()
}

/// Resident vadd kernel time through the `VyreBackend` resident API.
#[allow(clippy::too_many_arguments)]
fn resident_kernel_time(
    backend: &dyn VyreBackend,
    program: &Program,
    n: usize,
    a: &[u8],
    b: &[u8],
    expect: &Expect,
    warm: usize,
    samples: usize,
    budget: Duration,
) -> Outcome {
    let mut handles = Vec::new();
    let result = (|| -> Result<Outcome, Outcome> {
        let unsupported = |e: vyre_driver::BackendError| Outcome::Unsupported {
            reason: e.to_string(),
        };
        for _ in 0..3 {
            handles.push(backend.allocate_resident(n * 4).map_err(unsupported)?);
        }
        backend
            .upload_resident(&handles[0], a)
            .map_err(unsupported)?;
        backend
            .upload_resident(&handles[1], b)
            .map_err(unsupported)?;
        let config = DispatchConfig::default();
        let first = backend
            .dispatch_resident_timed(program, &handles, &config)
            .map_err(unsupported)?;
        let out = backend
            .download_resident(&handles[2])
            .map_err(unsupported)?;
        if let Err(why) = expect.check_one(&out) {
            return Err(Outcome::Fail {
                reason: format!("resident output: {why}"),
            });
        }
        let device_time = first.device_ns.is_some();
        let stats = measure(warm, samples, budget, || {
            let t = backend
                .dispatch_resident_timed(program, &handles, &config)
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

/// The 100-step resident sequence through the `VyreBackend` resident API.
#[allow(clippy::too_many_arguments)]
fn resident_sequence(
    backend: &dyn VyreBackend,
    program: &Program,
    n: usize,
    steps: usize,
    x0: &[u8],
    expect: &Expect,
    warm: usize,
    samples: usize,
    budget: Duration,
) -> Result<Outcome, Outcome> {
    let unsupported = |e: vyre_driver::BackendError| Outcome::Unsupported {
        reason: e.to_string(),
    };
    let x = backend.allocate_resident(n * 4).map_err(unsupported)?;
    let result = (|| -> Result<Outcome, Outcome> {
        backend.upload_resident(&x, x0).map_err(unsupported)?;
        let resources = [x.clone()];
        let list: Vec<ResidentDispatchStep<'_>> = (0..steps)
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
            byte_len: n * 4,
        }];
        let mut out = Vec::new();
        backend
            .dispatch_resident_sequence_read_ranges_into(&list, &ranges, &mut [&mut out])
            .map_err(unsupported)?;
        if let Err(why) = expect.check_one(&out) {
            return Err(Outcome::Fail { reason: why });
        }
        let stats = measure(warm, samples, budget, || {
            timed(|| {
                backend
                    .dispatch_resident_sequence_read_ranges_into(&list, &ranges, &mut [&mut out])
                    .map_err(|e| e.to_string())
            })
        })
        .map_err(|e| Outcome::Fail {
            reason: format!("error while timing: {e}"),
        })?;
        // The repeated-sequence API (1 step x 100), informational, checked too.
        let mut extra = BTreeMap::new();
        let one = &list[..1];
        let repeated = (|| -> R<f64> {
            backend.upload_resident(&x, x0).map_err(|e| e.to_string())?;
            backend
                .dispatch_resident_repeated_sequence_read_ranges_into(
                    &[],
                    one,
                    steps as u32,
                    &ranges,
                    &mut [&mut out],
                )
                .map_err(|e| e.to_string())?;
            expect.check_one(&out)?;
            let s = measure(warm, samples, budget, || {
                timed(|| {
                    backend
                        .dispatch_resident_repeated_sequence_read_ranges_into(
                            &[],
                            one,
                            steps as u32,
                            &ranges,
                            &mut [&mut out],
                        )
                        .map_err(|e| e.to_string())
                })
            })?;
            Ok(s.median_ns / steps as f64)
        })();
        let note = match repeated {
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

/// Fixture inputs: cases x buffers x bytes.
type InputsFn = fn() -> Vec<Vec<Vec<u8>>>;

struct Fixture {
    id: &'static str,
    build: fn() -> Program,
    inputs: Option<InputsFn>,
}

/// Every entry of the vyre-primitives and vyre-intrinsics fixture corpora.
/// vyre-cuda with its environment's options, adjusted by `adjust`.
fn open_ours(adjust: impl FnOnce(&mut vyre_cuda::CudaOptions)) -> R<vyre_cuda::CudaBackend> {
    let mut options = vyre_cuda::CudaOptions::from_env().map_err(|e| e.to_string())?;
    adjust(&mut options);
    vyre_cuda::CudaBackend::with_options(options).map_err(|e| e.to_string())
}

fn corpus() -> Vec<Fixture> {
    let primitives = vyre_primitives::harness::all_entries().map(|e| Fixture {
        id: e.id,
        build: e.build,
        inputs: e.test_inputs,
    });
    let intrinsics = vyre_intrinsics::harness::all_entries().map(|e| Fixture {
        id: e.id,
        build: e.build,
        inputs: e.test_inputs,
    });
    primitives.chain(intrinsics).collect()
}

fn write_outputs(opts: &Opts, report: &Report) {
    let table = report.table();
    let targets = report.targets_table();
    println!("\n{table}\n{targets}");
    if let Some(path) = &opts.svg {
        if let Err(e) = std::fs::write(path, report.svg()) {
            eprintln!("writing {}: {e}", path.display());
        }
    }
    if let Some(path) = &opts.markdown {
        let mut notes = String::new();
        for row in &report.rows {
            for note in &row.notes {
                notes.push_str(&format!("* `{}`: {note}\n", row.id));
            }
            for (engine, o) in &row.engines {
                if let Outcome::Ok { extra, note, .. } = o {
                    if let Some(note) = note {
                        notes.push_str(&format!("* `{}` / {engine}: {note}\n", row.id));
                    }
                    if !extra.is_empty() {
                        let list: Vec<String> =
                            extra.iter().map(|(k, v)| format!("{k} = {v:.1}")).collect();
                        notes.push_str(&format!(
                            "* `{}` / {engine}: {}\n",
                            row.id,
                            list.join(", ")
                        ));
                    }
                }
            }
        }
        let text = format!("{table}\n{targets}\n{notes}");
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("writing {}: {e}", path.display());
        }
    }
}

fn main() {
    let opts = parse_opts();
    if let Some(dir) = &opts.dump_ptx {
        let _ = std::fs::create_dir_all(dir);
        let _ = std::fs::write(
            dir.join("floor_main.ptx"),
            ptx::main_module(9, 0, SALT, ALPHA),
        );
        let _ = std::fs::write(dir.join("floor_cold.ptx"), ptx::cold_module(9, 0, 12345));
        // The two backends' PTX for the same cold-compile program, for comparison.
        let program = programs::vadd(1024, 12345);
        let config = DispatchConfig::default();
        if let Ok(k) =
            vyre_cuda::codegen::emit_ptx(&program, config.workgroup_override, vyre_cuda::codegen::PtxTarget::sm90())
        {
            let _ = std::fs::write(dir.join("vyre_cuda_cold.ptx"), k.ptx);
        }
        if let Ok(text) = vyre_driver_cuda::codegen::program_to_ptx_for_sm(&program, &config, 90) {
            let _ = std::fs::write(dir.join("incumbent_cold.ptx"), text);
        }
        println!("wrote {}", dir.display());
        return;
    }
    if let Some(path) = &opts.render {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            eprintln!("{}: {e}", path.display());
            std::process::exit(2)
        });
        let report: Report = serde_json::from_str(&text).unwrap_or_else(|e| {
            eprintln!("{}: {e}", path.display());
            std::process::exit(2)
        });
        write_outputs(&opts, &report);
        return;
    }
    // The incumbent's autotuner may rewrite 1-D workgroups; keep shapes fixed (contract §5.4).
    if std::env::var_os("VYRE_AUTOTUNER").is_none() {
        std::env::set_var("VYRE_AUTOTUNER", "off");
    }
    let started = Instant::now();
    let mut report = Report {
        date: std::process::Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%d %H:%M UTC")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        ..Report::default()
    };
    for var in [
        "VYRE_AUTOTUNER",
        "CUDA_CACHE_DISABLE",
        "CUDA_CACHE_PATH",
        "CUDA_CACHE_MAXSIZE",
        "VYRE_CUDA_DEVICE",
    ] {
        if let Ok(v) = std::env::var(var) {
            report.environment.insert(var.into(), v);
        }
    }
    let mut log = Vec::new();
    if opts.blocking_sync {
        // Before any engine retains the primary context: every wait then blocks the
        // thread instead of spinning, so thread CPU time is the host's own work.
        match floor::set_blocking_sync(0) {
            Ok(()) => log.push("primary context: CU_CTX_SCHED_BLOCKING_SYNC".to_string()),
            Err(e) => log.push(format!("--blocking-sync failed: {e}")),
        }
    }
    // vyre-cuda opens the device first, so its own driver defaults (applied before cuInit)
    // take effect as they would in a program of its own.
    let ours_blocking_wait = opts.ours_blocking_wait;
    let ours = match std::panic::catch_unwind(|| {
        open_ours(|options| options.blocking_wait |= ours_blocking_wait)
    })
    .unwrap_or_else(|_| Err("panicked while opening the device".into()))
    {
        Ok(b) => {
            log.push(format!(
                "vyre-cuda: {} / {}{}",
                b.device_info().name,
                b.target(),
                if ours_blocking_wait {
                    " (CudaOptions::blocking_wait)"
                } else {
                    ""
                }
            ));
            Some(b)
        }
        Err(e) => {
            log.push(format!("vyre-cuda: cannot open the device: {e}"));
            None
        }
    };
    let floor = std::panic::catch_unwind(|| Floor::open(0, SALT, ALPHA))
        .unwrap_or_else(|_| Err("panicked while opening the device".into()));
    let floor = match floor {
        Ok(f) => {
            log.push(format!("device: {:?}", f.facts));
            report.device = Some(f.facts.clone());
            Some(f)
        }
        Err(e) => {
            log.push(format!("floor: cannot open the device: {e}"));
            None
        }
    };
    let inc: Option<Box<dyn VyreBackend>> =
        match std::panic::catch_unwind(vyre_driver_cuda::CudaBackend::acquire)
            .unwrap_or_else(|_| Err("panicked while acquiring".to_string()))
        {
            Ok(b) => {
                log.push(
                    "incumbent: vyre-driver-cuda 0.6.5 acquired (CudaBackendRegistration::new)"
                        .into(),
                );
                Some(Box::new(vyre_driver_cuda::CudaBackendRegistration::new(b)))
            }
            Err(e) => {
                log.push(format!("incumbent: cannot open the device: {e}"));
                None
            }
        };
    for var in [
        "CUDA_CACHE_DISABLE",
        "CUDA_CACHE_PATH",
        "CUDA_CACHE_MAXSIZE",
    ] {
        if let Ok(v) = std::env::var(var) {
            report
                .environment
                .insert(format!("{var} (after the engines opened)"), v);
        }
    }
    let gpu = floor.is_some() || ours.is_some() || inc.is_some();
    let budget = Duration::from_secs(if opts.quick { 5 } else { 15 });
    let mut h = Harness {
        opts,
        floor,
        inc,
        ours,
        report,
        config: DispatchConfig::default(),
        budget,
    };
    for line in log {
        h.log(line);
    }
    type Workload = Box<dyn Fn(&mut Harness)>;
    let mut workloads: Vec<(&str, Workload)> = vec![
        ("emit_ptx_corpus", Box::new(|h| h.emit_corpus())),
        ("tiny", Box::new(|h| h.tiny())),
        ("warm_1024", Box::new(|h| h.warm_1024())),
    ];
    if gpu {
        let sizes: &[u32] = if h.opts.quick {
            &[16, 20]
        } else {
            &[16, 20, 24, 26]
        };
        for &k in sizes {
            let id: &'static str = Box::leak(format!("vadd_u32_2^{k}").into_boxed_str());
            workloads.push((
                id,
                Box::new(move |h| h.elementwise_e2e(id, Kernel::Vadd, 1 << k)),
            ));
        }
        let k = if h.opts.quick { 20 } else { 24 };
        let id: &'static str = Box::leak(format!("saxpy_f32_2^{k}").into_boxed_str());
        workloads.push((
            id,
            Box::new(move |h| h.elementwise_e2e(id, Kernel::Saxpy, 1 << k)),
        ));
        let res: &[u32] = if h.opts.quick { &[20] } else { &[24, 26] };
        for &k in res {
            let id: &'static str = Box::leak(format!("resident_vadd_2^{k}").into_boxed_str());
            workloads.push((id, Box::new(move |h| h.resident_vadd(id, 1 << k))));
        }
        workloads.push(("resident_sequence_100", Box::new(|h| h.resident_sequence())));
        workloads.push((
            "small_dispatch_threshold",
            Box::new(|h| h.small_dispatch_threshold()),
        ));
        workloads.push(("reduce_atomic_2^24", Box::new(|h| h.reduce_atomic())));
        workloads.push(("cold_compile", Box::new(|h| h.cold_compile())));
        // Diagnostics before the corpus: a corpus program that poisons the context (a
        // sticky error) must not take the floor's measurements with it.
        workloads.push(("diagnostics", Box::new(|h| h.diagnostics())));
        workloads.push(("corpus", Box::new(|h| h.corpus())));
        // Probes that run only when `--only` names them.
        if h.opts.only.iter().flatten().any(|w| w == "jit_probe") {
            workloads.push(("jit_probe", Box::new(|h| h.jit_probe())));
        }
    } else {
        workloads.truncate(1);
        h.log("no GPU: only the emitter row runs".into());
    }
    for (id, run) in workloads {
        if !h.wants(id) {
            continue;
        }
        if started.elapsed() > h.opts.deadline {
            h.log(format!(
                "{id}: SKIPPED (past the {} s deadline)",
                h.opts.deadline.as_secs()
            ));
            continue;
        }
        let t = Instant::now();
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| run(&mut h)));
        if let Err(panic) = result {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            h.log(format!("{id}: PANIC {msg}"));
        }
        h.log(format!(
            "  ({id} took {:.1} s, {:.0} s total)",
            t.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64()
        ));
    }
    h.save();
    write_outputs(&h.opts, &h.report);
    // Drop the floor first: its primary-context retain goes before the backends'.
    drop(h.floor.take());
}
