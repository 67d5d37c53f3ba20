//! GPU mode of the differential fuzzer: run random valid Programs on `CudaBackend` and on
//! vyre-reference and compare the bytes (or that both fail). Failures are shrunk on the
//! GPU and saved as regression cases.
//!
//! Knobs (environment):
//! * `VYRE_CUDA_FUZZ_PROGRAMS` — programs to run (default 2000; e.g. 100000 for the big run);
//! * `VYRE_CUDA_FUZZ_SEED` — base seed (program i uses `program_seed(base, i)`);
//! * `VYRE_CUDA_FUZZ_SHAPE` — `default` (28 statements, depth 3), `replicated` (the default
//!   shape with every invocation the same computation, in place), `large` (48, depth 6,
//!   literal-only conditions and divisions, cast chains; `GenConfig::large`) or
//!   `complete` (see below);
//! * `VYRE_CUDA_FUZZ_SEEDS` — comma-separated program seeds to run instead (e.g. to
//!   re-run and shrink failures reported by an earlier run);
//! * `VYRE_CUDA_FUZZ_SECONDS` — stop taking new programs after this many seconds;
//! * `VYRE_CUDA_FUZZ_THREADS` — worker threads (default: all cores);
//! * `VYRE_CUDA_FUZZ_BACKEND_CHUNK` — programs per `CudaBackend` (a fresh backend per
//!   chunk bounds the number of loaded modules; default 4000);
//! * `VYRE_CUDA_FUZZ_SHRINK` — failures to shrink (default 12), `VYRE_CUDA_FUZZ_SHRINK_SECONDS`
//!   — time per shrink (default 30), `VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS` — for all (180);
//! * `VYRE_CUDA_FUZZ_SHARD` — `k/n`: run only programs `i` with `i % n == k` (several
//!   processes share the device; the driver's JIT compiles one module at a time per
//!   process, so processes scale where threads do not);
//! * `VYRE_CUDA_FUZZ_SKIP_SHRINK` — `|`-separated substrings: failures whose kind or
//!   detail contains one (known, already saved bugs) are counted but not shrunk;
//! * `VYRE_CUDA_FUZZ_SAVE_DIR` — where shrunk failures are written.
//! * `VYRE_CUDA_FUZZ_HANG_SECONDS` — a dispatch running longer is a hang (default 90).
//!
//! Without a device it prints `skipped: no CUDA device` (or fails under
//! `VYRE_CUDA_REQUIRE_GPU=1`).
//!
//! `VYRE_CUDA_FUZZ_SHAPE=complete` (`GenConfig::complete`) is issue 17's gate: the large
//! shape plus every construct of issue 17 (what vyre-reference runs and the emitter did
//! not lower; README "Not yet lowered" lists what is still refused)
//! (subgroup operations in divergent branches, in loops inside them, after an early
//! `Return` and over changing values; bytes loads as indices, select conditions,
//! operands, assigned values and `Let`s of writable bytes loads; workgroup bytes buffers;
//! async copies whose start and wait are in different blocks). Until issue 17 is done it
//! is expected to report rejections: a program the emitter rejects while the reference
//! runs it is counted under `rejected` and listed by construct name, one the reference
//! fails too counts as failing on both sides; neither fails the run. Mismatches, backend
//! errors where the reference succeeds, missed run-time errors and panics do. The gate is met when a
//! 10^5-program run reports 0 rejected and 0 mismatches (`tests/fuzz_codegen.rs` prints
//! the same per-construct rejection table without a GPU).

mod common;
#[path = "fuzz/mod.rs"]
mod fuzz;

use fuzz::case::{describe_bytes, FuzzCase};
use fuzz::check::{gpu_check, gpu_still_fails, Failure, GpuVerdict};
use fuzz::gen::{generate, GenConfig};
use fuzz::oracle::{judge, Outcome};
use fuzz::rng::program_seed;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use vyre_cuda::CudaBackend;

const DEFAULT_PROGRAMS: u64 = 2000;
const DEFAULT_SEED: u64 = 0x6F75_7A7A_2024;
/// A dispatch running longer than this is a hang: the process saves the case and exits
/// (`VYRE_CUDA_FUZZ_HANG_SECONDS` overrides it; keep it below the time a shard's caller
/// leaves after `VYRE_CUDA_FUZZ_SECONDS`, or a late hang is killed unreported).
const DEFAULT_HANG: Duration = Duration::from_secs(90);

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

struct Found {
    seed: u64,
    case: FuzzCase,
    failure: Failure,
}

#[derive(Default)]
struct Counters {
    run: AtomicU64,
    passed: AtomicU64,
    both_failed: AtomicU64,
    rejected: AtomicU64,
    lane_dependent: AtomicU64,
    drafts: AtomicU64,
    failed: AtomicU64,
    /// Where the time goes: the reference's runs and the GPU checks (emit, load, launch,
    /// compare), summed over workers.
    reference_us: AtomicU64,
    gpu_us: AtomicU64,
    /// The slowest GPU checks: (milliseconds, seed), longest first.
    slowest: Mutex<Vec<(u64, u64)>>,
}

impl Counters {
    fn gpu_check_took(&self, took: Duration, seed: u64) {
        self.gpu_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        let mut slowest = self.slowest.lock().unwrap();
        slowest.push((took.as_millis() as u64, seed));
        slowest.sort_unstable_by(|a, b| b.cmp(a));
        slowest.truncate(5);
    }
}

/// The backend for the current chunk of programs.
struct Rotating {
    current: RwLock<(u64, Arc<CudaBackend>)>,
    chunk: u64,
}

impl Rotating {
    fn get(&self, index: u64) -> Arc<CudaBackend> {
        let want = index / self.chunk;
        {
            let guard = self.current.read().unwrap();
            if guard.0 >= want {
                return Arc::clone(&guard.1);
            }
        }
        let mut guard = self.current.write().unwrap();
        if guard.0 < want {
            match CudaBackend::new() {
                Ok(fresh) => *guard = (want, Arc::new(fresh)),
                Err(e) => {
                    println!("fuzz: could not open a fresh backend ({e}); keeping the old one")
                }
            }
            guard.0 = want;
        }
        Arc::clone(&guard.1)
    }
}

/// Hang detection: a dispatch that never returns would hold the whole run (and the
/// device session), so the watchdog saves the program and exits the process.
struct Watch {
    slots: Vec<(AtomicU64, AtomicU64)>,
    done: AtomicBool,
    start: Instant,
    /// A dispatch running longer is a hang ([`DEFAULT_HANG`]).
    hang: Duration,
}

impl Watch {
    fn begin(&self, slot: usize, seed: u64) {
        self.slots[slot].0.store(seed, Ordering::Relaxed);
        self.slots[slot].1.store(
            self.start.elapsed().as_millis() as u64 + 1,
            Ordering::Relaxed,
        );
    }

    fn end(&self, slot: usize) {
        self.slots[slot].1.store(0, Ordering::Relaxed);
    }
}

fn spawn_watchdog(watch: Arc<Watch>, config: GenConfig) {
    std::thread::spawn(move || {
        while !watch.done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(500));
            let now = watch.start.elapsed().as_millis() as u64;
            let hung = watch.slots.iter().any(|(_, since)| {
                let since = since.load(Ordering::Relaxed);
                since != 0 && now.saturating_sub(since) > watch.hang.as_millis() as u64
            });
            if hung {
                report_hang(&watch, &config, now);
            }
        }
    });
}

/// Saves every program in flight when a dispatch outlived `watch.hang` and exits. Workers
/// share one device, so a dispatch can wait behind another worker's hanging kernel (or
/// the module load it blocks): the longest-running one is not necessarily the culprit.
/// Re-run the printed seeds one at a time (`VYRE_CUDA_FUZZ_THREADS=1`) to find it.
fn report_hang(watch: &Watch, config: &GenConfig, now: u64) -> ! {
    let mut in_flight: Vec<(u64, u64, usize)> = watch
        .slots
        .iter()
        .enumerate()
        .filter_map(|(slot, (seed, since))| {
            let since = since.load(Ordering::Relaxed);
            (since != 0).then(|| {
                (
                    now.saturating_sub(since),
                    seed.load(Ordering::Relaxed),
                    slot,
                )
            })
        })
        .collect();
    in_flight.sort_by_key(|flight| std::cmp::Reverse(flight.0));
    let seeds: Vec<String> = in_flight
        .iter()
        .map(|(_, seed, _)| format!("{seed:#x}"))
        .collect();
    println!(
        "fuzz: HANG: a dispatch ran longer than {:?}; {} programs in flight (longest first): {}",
        watch.hang,
        in_flight.len(),
        seeds.join(",")
    );
    for (running_ms, seed, slot) in &in_flight {
        let shrinking = *slot + 1 == watch.slots.len();
        let found = Found {
            seed: *seed,
            case: generate(*seed, config).case,
            failure: Failure::new(
                "hang",
                format!(
                    "in flight for {running_ms} ms when a dispatch outlived {:?}",
                    watch.hang
                ),
            ),
        };
        let note = format!(
            "one of {} programs in flight at a hang{}; the process exits on a hang",
            in_flight.len(),
            if shrinking {
                " (while shrinking it)"
            } else {
                ""
            }
        );
        let path = save_raw(&found, &note);
        println!("fuzz: in flight {running_ms} ms: seed {seed:#x}; saved {path}");
    }
    println!("fuzz: exiting on a hang");
    std::process::exit(3);
}

/// The failure with numbers and quoted values blanked (groups one bug's instances).
fn signature(failure: &Failure) -> String {
    let mut detail: String = failure
        .detail
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    for cut in ["Bytes(", "U64(", "I32(", " got ", "`"] {
        if let Some(at) = detail.find(cut) {
            detail.truncate(at);
        }
    }
    detail.truncate(detail.len().min(90));
    format!("{}: {detail}", failure.kind)
}

fn save_raw(found: &Found, note: &str) -> String {
    let name = format!(
        "gpu-{}-{:016x}",
        found.failure.kind.split(':').next().unwrap_or("failure"),
        found.seed
    );
    let comments = format!(
        "found by tests/gpu_fuzz.rs (seed {:#x}); NOT shrunk: {note}\n{}: {}",
        found.seed, found.failure.kind, found.failure.detail
    );
    match fuzz::case::save(&found.case, &name, &found.failure.kind, &comments) {
        Ok(p) => p.display().to_string(),
        Err(e) => format!("(not saved: {e})"),
    }
}

#[test]
fn gpu_fuzz_matches_the_reference() {
    let Some(shared) = common::gpu::backend() else {
        return;
    };
    let programs = env_u64("VYRE_CUDA_FUZZ_PROGRAMS").unwrap_or(DEFAULT_PROGRAMS);
    let base = env_u64("VYRE_CUDA_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let seconds = env_u64("VYRE_CUDA_FUZZ_SECONDS");
    let threads = env_u64("VYRE_CUDA_FUZZ_THREADS")
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get() as u64))
        .max(1);
    let chunk = env_u64("VYRE_CUDA_FUZZ_BACKEND_CHUNK")
        .unwrap_or(4000)
        .max(1);
    let (shard, shards) = std::env::var("VYRE_CUDA_FUZZ_SHARD")
        .ok()
        .and_then(|v| {
            let (k, n) = v.split_once('/')?;
            Some((k.trim().parse::<u64>().ok()?, n.trim().parse::<u64>().ok()?))
        })
        .filter(|(k, n)| k < n)
        .unwrap_or((0, 1));
    let explicit: Option<Vec<u64>> = std::env::var("VYRE_CUDA_FUZZ_SEEDS").ok().map(|v| {
        v.split(',')
            .filter_map(|s| {
                let s = s.trim();
                u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
            })
            .collect()
    });
    let programs = explicit.as_ref().map_or(programs, |s| s.len() as u64);
    let skip_shrink: Vec<String> = std::env::var("VYRE_CUDA_FUZZ_SKIP_SHRINK")
        .map(|v| {
            v.split('|')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let shrink_max = env_u64("VYRE_CUDA_FUZZ_SHRINK").unwrap_or(12);
    let shrink_seconds = env_u64("VYRE_CUDA_FUZZ_SHRINK_SECONDS").unwrap_or(30);
    let shrink_total =
        Duration::from_secs(env_u64("VYRE_CUDA_FUZZ_SHRINK_TOTAL_SECONDS").unwrap_or(180));
    println!(
        "fuzz: device {} ({}), {programs} programs from base seed {base:#x} (shard {shard}/{shards}), {threads} threads",
        shared.device_info().name,
        shared.target()
    );

    let shape = std::env::var("VYRE_CUDA_FUZZ_SHAPE").unwrap_or_else(|_| "default".into());
    let config = GenConfig::named(&shape).unwrap_or_else(|| {
        panic!("VYRE_CUDA_FUZZ_SHAPE={shape}: use `default`, `large`, `replicated` or `complete`")
    });
    println!("fuzz: generator shape {shape}");
    let start = Instant::now();
    let deadline = seconds.map(|s| start + Duration::from_secs(s));
    let first = CudaBackend::new()
        .map(Arc::new)
        .expect("open a CUDA backend");
    let backends = Rotating {
        current: RwLock::new((0, first)),
        chunk,
    };
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let counters = Counters::default();
    let found: Mutex<Vec<Found>> = Mutex::new(Vec::new());
    let rejected_by: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
    // Programs checked on the GPU holding each construct of issue 17's gate.
    let constructs: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
    let mut fatal: Option<String> = None;
    let fatal_slot: Mutex<Option<String>> = Mutex::new(None);
    // Per worker (plus one slot for the shrinker): seed in flight and when its dispatch
    // started (ms since `start` + 1), 0 = idle.
    let watch = Arc::new(Watch {
        slots: (0..=threads)
            .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
            .collect(),
        done: AtomicBool::new(false),
        start,
        hang: env_u64("VYRE_CUDA_FUZZ_HANG_SECONDS").map_or(DEFAULT_HANG, Duration::from_secs),
    });
    spawn_watchdog(Arc::clone(&watch), config.clone());
    let watch_ref: &Watch = &watch;

    std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for worker in 0..threads as usize {
            let (explicit, constructs) = (&explicit, &constructs);
            let (next, stop, counters, found, rejected_by, backends, config, watch, fatal_slot) = (
                &next,
                &stop,
                &counters,
                &found,
                &rejected_by,
                &backends,
                &config,
                watch_ref,
                &fatal_slot,
            );
            workers.push(scope.spawn(move || loop {
                if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let local = next.fetch_add(1, Ordering::Relaxed);
                let i = local * shards + shard;
                if i >= programs {
                    break;
                }
                let seed = match &explicit {
                    Some(seeds) => match seeds.get(i as usize) {
                        Some(seed) => *seed,
                        None => break,
                    },
                    None => program_seed(base, i),
                };
                let generated = generate(seed, config);
                counters
                    .drafts
                    .fetch_add(u64::from(generated.rejected_drafts) + 1, Ordering::Relaxed);
                let case = generated.case;
                let judged = Instant::now();
                let verdict = judge(&case);
                counters
                    .reference_us
                    .fetch_add(judged.elapsed().as_micros() as u64, Ordering::Relaxed);
                counters.run.fetch_add(1, Ordering::Relaxed);
                if verdict.lane_order_dependent {
                    counters.lane_dependent.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                {
                    let mut held = constructs.lock().unwrap();
                    for construct in fuzz::coverage::unlowered_constructs(&case.program) {
                        *held.entry(construct).or_default() += 1;
                    }
                }
                let backend = backends.get(local);
                watch.begin(worker, seed);
                let checked = Instant::now();
                let result = gpu_check(&backend, &case, &verdict);
                counters.gpu_check_took(checked.elapsed(), seed);
                watch.end(worker);
                match result {
                    GpuVerdict::Pass => {
                        counters.passed.fetch_add(1, Ordering::Relaxed);
                        if !verdict.outcome.is_ok() {
                            counters.both_failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    GpuVerdict::Rejected(construct) => {
                        counters.rejected.fetch_add(1, Ordering::Relaxed);
                        *rejected_by.lock().unwrap().entry(construct).or_default() += 1;
                    }
                    GpuVerdict::Fail(failure) => {
                        let nth = counters.failed.fetch_add(1, Ordering::Relaxed);
                        let sticky =
                            failure.kind == "gpu-error: driver-sticky" || backend.device_lost();
                        if nth < 100 {
                            println!(
                                "fuzz: FAIL seed {seed:#x}: {}: {}",
                                failure.kind,
                                failure.detail.chars().take(400).collect::<String>()
                            );
                        }
                        found.lock().unwrap().push(Found {
                            seed,
                            case,
                            failure,
                        });
                        if sticky {
                            *fatal_slot.lock().unwrap() = Some(format!(
                                "seed {seed:#x} left the CUDA context unusable; the run stops here"
                            ));
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }));
        }
        for w in workers {
            let _ = w.join();
        }
    });
    if let Some(f) = fatal_slot.lock().unwrap().take() {
        fatal = Some(f);
    }
    let run_time = start.elapsed();

    // Shrink a sample of the failures (distinct kinds first) and save them.
    let mut found = found.into_inner().unwrap();
    found.sort_by_key(|f| f.seed);
    let skipped = |f: &Found| {
        skip_shrink
            .iter()
            .any(|s| f.failure.kind.contains(s.as_str()) || f.failure.detail.contains(s.as_str()))
    };
    let mut order: Vec<usize> = Vec::new();
    let mut kinds = std::collections::BTreeSet::new();
    for (i, f) in found.iter().enumerate() {
        if !skipped(f) && kinds.insert(f.failure.kind.clone()) {
            order.push(i);
        }
    }
    // Then one per distinct signature (kind + the detail with numbers blanked), so that
    // one frequent bug does not use up the whole shrink budget.
    let mut signatures = std::collections::BTreeSet::new();
    for (i, f) in found.iter().enumerate() {
        if !skipped(f) && signatures.insert(signature(&f.failure)) && !order.contains(&i) {
            order.push(i);
        }
    }
    let listed: std::collections::BTreeSet<usize> = order.iter().copied().collect();
    order.extend((0..found.len()).filter(|i| !listed.contains(i) && !skipped(&found[*i])));
    let not_shrunk = found.iter().filter(|f| skipped(f)).count();
    if not_shrunk > 0 {
        println!("fuzz: {not_shrunk} failures match VYRE_CUDA_FUZZ_SKIP_SHRINK (known bugs): counted, not shrunk");
    }
    let mut saved = Vec::new();
    let (mut raw_saved, mut raw_signatures) = (0, std::collections::BTreeSet::new());
    let mut shrunk_programs = std::collections::BTreeSet::new();
    let backend = backends.get(0);
    for (n, &i) in order.iter().enumerate() {
        let f = &found[i];
        if fatal.is_some()
            || n as u64 >= shrink_max
            || backend.device_lost()
            || run_time + shrink_total <= start.elapsed()
        {
            if raw_saved < 10 && raw_signatures.insert(signature(&f.failure)) {
                raw_saved += 1;
                saved.push(save_raw(
                    f,
                    "shrinking skipped (limit reached or device unusable)",
                ));
            }
            continue;
        }
        let mut inner = gpu_still_fails(&backend, &f.failure.kind);
        let shrink_slot = watch.slots.len() - 1;
        let seed = f.seed;
        let watch_ref = &watch;
        let mut predicate = move |case: &FuzzCase| {
            watch_ref.begin(shrink_slot, seed);
            let result = inner(case);
            watch_ref.end(shrink_slot);
            result
        };
        if !predicate(&f.case) {
            saved.push(save_raw(
                f,
                "the failure did not reproduce for the shrinker (flaky?)",
            ));
            continue;
        }
        let budget = fuzz::shrink::Budget {
            max_evaluations: 3000,
            max_time: Duration::from_secs(shrink_seconds),
            freeze_own_indices: true,
        };
        let (small, stats) = fuzz::shrink::shrink(&f.case, &mut predicate, budget);
        let text = fuzz::case::pretty(&small.program);
        if !shrunk_programs.insert(text) {
            println!("fuzz: seed {:#x} shrinks to an already saved case", f.seed);
            continue;
        }
        // Describe the shrunk case: expected vs got.
        let verdict = judge(&small);
        let detail = match gpu_check(&backend, &small, &verdict) {
            GpuVerdict::Fail(failure) => failure.detail,
            _ => "(no longer fails?)".into(),
        };
        let got = fuzz::check::dispatch(&backend, &small);
        let mut outputs = String::new();
        let returned: Vec<_> = small
            .program
            .buffers()
            .iter()
            .filter(|d| vyre_reference::is_reference_output(d))
            .map(|d| (d.name().to_string(), d.element()))
            .collect();
        match &verdict.outcome {
            Outcome::Ok(want) => {
                for (j, w) in want.iter().enumerate() {
                    let (name, el) = returned.get(j).cloned().unwrap_or_else(|| {
                        (format!("output {j}"), vyre_foundation::ir::DataType::U32)
                    });
                    outputs.push_str(&format!("reference {name} = {}\n", describe_bytes(&el, w)));
                }
            }
            other => outputs.push_str(&format!("reference: {other:?}\n")),
        }
        match &got {
            Ok(Ok(got)) => {
                for (j, g) in got.iter().enumerate() {
                    let (name, el) = returned.get(j).cloned().unwrap_or_else(|| {
                        (format!("output {j}"), vyre_foundation::ir::DataType::U32)
                    });
                    outputs.push_str(&format!("gpu       {name} = {}\n", describe_bytes(&el, g)));
                }
            }
            Ok(Err(e)) => outputs.push_str(&format!("gpu: error: {e}\n")),
            Err(p) => outputs.push_str(&format!("gpu: panic: {p}\n")),
        }
        let name = format!(
            "gpu-{}-{:016x}",
            f.failure.kind.split(':').next().unwrap_or("failure"),
            f.seed
        );
        let comments = format!(
            "found by tests/gpu_fuzz.rs on {} (seed {:#x}); shrunk {:?} -> {:?} in {} evaluations\n{}: {}\n{}",
            backend.device_info().name,
            f.seed,
            stats.before,
            stats.after,
            stats.evaluations,
            f.failure.kind,
            detail,
            outputs
        );
        match fuzz::case::save(&small, &name, &f.failure.kind, &comments) {
            Ok(p) => saved.push(p.display().to_string()),
            Err(e) => saved.push(format!("(not saved: {e})")),
        }
    }

    watch.done.store(true, Ordering::Relaxed);
    let c = &counters;
    let run = c.run.load(Ordering::Relaxed);
    let failed = c.failed.load(Ordering::Relaxed);
    let rejected = c.rejected.load(Ordering::Relaxed);
    let drafts = c.drafts.load(Ordering::Relaxed);
    println!("fuzz: {run} programs run, {failed} mismatches, {rejected} rejected");
    println!(
        "fuzz: {} byte-identical ({} of them failing in both), {} lane-order dependent (skipped), {:.1}% of drafts accepted by vyre's validator; {:.1}s ({:.0} programs/s), total {:.1}s",
        c.passed.load(Ordering::Relaxed),
        c.both_failed.load(Ordering::Relaxed),
        c.lane_dependent.load(Ordering::Relaxed),
        100.0 * run as f64 / drafts.max(1) as f64,
        run_time.as_secs_f64(),
        run as f64 / run_time.as_secs_f64().max(1e-9),
        start.elapsed().as_secs_f64()
    );
    println!(
        "fuzz: worker time {:.1}s in the reference, {:.1}s in GPU checks; slowest GPU checks (ms, seed): {:?}",
        c.reference_us.load(Ordering::Relaxed) as f64 * 1e-6,
        c.gpu_us.load(Ordering::Relaxed) as f64 * 1e-6,
        c.slowest
            .lock()
            .unwrap()
            .iter()
            .map(|&(ms, seed)| format!("{ms} {seed:#x}"))
            .collect::<Vec<_>>()
    );
    let rejected_by = rejected_by.into_inner().unwrap();
    if !rejected_by.is_empty() {
        println!("fuzz: rejected by construct: {rejected_by:?}");
    }
    let checked = (run - c.lane_dependent.load(Ordering::Relaxed)).max(1);
    let held: Vec<String> = (constructs.into_inner().unwrap().iter())
        .map(|(name, n)| format!("{name} {n} ({:.1}%)", 100.0 * *n as f64 / checked as f64))
        .collect();
    println!("fuzz: programs holding each construct: {}", held.join(", "));
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    for f in &found {
        *by_kind.entry(f.failure.kind.as_str()).or_default() += 1;
    }
    if !by_kind.is_empty() {
        println!("fuzz: failures by kind: {by_kind:?}");
    }
    for path in &saved {
        println!("fuzz: saved {path}");
    }
    if let Some(f) = &fatal {
        println!("fuzz: {f}");
    }
    let metrics = backends.get(0).metric_snapshot();
    let metrics: Vec<String> = metrics.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("fuzz: last backend metrics: {}", metrics.join(" "));
    assert_eq!(
        failed, 0,
        "{failed} programs differ from the reference (see the FAIL lines and the saved cases)"
    );
}
