//! CI mode of the differential fuzzer (no GPU needed): generate a few thousand random
//! valid Programs from fixed seeds, emit PTX for sm_80 and sm_90, assemble every kernel
//! with ptxas, run vyre-reference (forward and lane-reversed) on each, and assert that
//! nothing panics, every emitted kernel assembles, and every rejection carries `Fix:`.
//! Failures are shrunk and saved under `tests/fuzz_regressions/`.
//!
//! `VYRE_CUDA_FUZZ_CI_PROGRAMS` (default 3000) and `VYRE_CUDA_FUZZ_SEED` override the
//! program count and base seed.

mod common;
#[path = "fuzz/mod.rs"]
mod fuzz;

use fuzz::check::{cpu_check, cpu_still_fails, Failure};
use fuzz::coverage::Coverage;
use fuzz::gen::{generate, GenConfig};
use fuzz::oracle::{judge, Outcome};
use fuzz::ptxas_batch::{assemble_all, Kernel};
use fuzz::rng::program_seed;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

const DEFAULT_PROGRAMS: usize = 3000;
const DEFAULT_SEED: u64 = 0x5EED_C0DE_2024;
/// Kernels per ptxas process.
const BATCH: usize = 120;

struct Program {
    seed: u64,
    drafts: u32,
    outcome: &'static str,
    lane_order_dependent: bool,
    failures: Vec<Failure>,
    kernels: Vec<Option<String>>,
    rejected: Vec<String>,
    coverage: Coverage,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| {
            let v = v.trim();
            match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok()?.to_string().parse().ok(),
                None => v.parse().ok(),
            }
        })
        .unwrap_or(default)
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

#[test]
fn fuzz_codegen_emits_assembles_and_never_panics() {
    let programs = env_or("VYRE_CUDA_FUZZ_CI_PROGRAMS", DEFAULT_PROGRAMS);
    let base = env_or("VYRE_CUDA_FUZZ_SEED", DEFAULT_SEED);
    let ptxas = common::ptxas::require_ptxas();
    let config = GenConfig::default();
    let start = Instant::now();

    // Phase 1: generate, emit for both targets, run the reference.
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Program)>> = Mutex::new(Vec::with_capacity(programs));
    std::thread::scope(|scope| {
        for _ in 0..threads() {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= programs {
                    break;
                }
                let seed = program_seed(base, i as u64);
                let generated = generate(seed, &config);
                let case = generated.case;
                let verdict = judge(&case);
                let (mut failures, kernels, rejected) = cpu_check(&case, true);
                if let Outcome::Panic(p) = &verdict.outcome {
                    failures.push(Failure::new(
                        format!("reference-panic: {}", fuzz::check::panic_key(p)),
                        format!("vyre-reference panicked: {p}"),
                    ));
                }
                let mut coverage = Coverage::default();
                coverage.add_program(&case.program);
                let program = Program {
                    seed,
                    drafts: generated.rejected_drafts + 1,
                    outcome: verdict.outcome.label(),
                    lane_order_dependent: verdict.lane_order_dependent,
                    failures,
                    kernels,
                    rejected,
                    coverage,
                };
                results.lock().unwrap().push((i, program));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, _)| *i);
    let phase1 = start.elapsed();

    // Phase 2: assemble every kernel, batched, both targets in parallel.
    let mut ptxas_failures: Vec<(u64, String, String)> = Vec::new();
    let mut assembled = [0usize; 2];
    if let Some(ptxas) = &ptxas {
        let mut jobs: Vec<(usize, Vec<Kernel>)> = Vec::new();
        for (t, _) in fuzz::check::targets().iter().enumerate() {
            let kernels: Vec<Kernel> = results
                .iter()
                .filter_map(|(_, p)| {
                    p.kernels[t].as_ref().map(|ptx| Kernel {
                        id: format!("{:#x}", p.seed),
                        ptx: ptx.clone(),
                    })
                })
                .collect();
            assembled[t] = kernels.len();
            let mut kernels = kernels.into_iter().peekable();
            while kernels.peek().is_some() {
                jobs.push((t, kernels.by_ref().take(BATCH).collect()));
            }
        }
        let next = AtomicUsize::new(0);
        let found = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..threads() {
                scope.spawn(|| loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some((t, kernels)) = jobs.get(j) else {
                        break;
                    };
                    let arch = fuzz::check::targets()[*t].1;
                    for (id, error) in assemble_all(ptxas, kernels, arch) {
                        let seed =
                            u64::from_str_radix(id.trim_start_matches("0x"), 16).unwrap_or(0);
                        found.lock().unwrap().push((seed, arch.to_string(), error));
                    }
                });
            }
        });
        ptxas_failures = found.into_inner().unwrap();
    }
    let phase2 = start.elapsed() - phase1;

    // Counts.
    let drafts: u64 = results.iter().map(|(_, p)| u64::from(p.drafts)).sum();
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut lane_dependent = 0;
    let mut rejected: BTreeMap<String, usize> = BTreeMap::new();
    let mut coverage = Coverage::default();
    let mut failures: Vec<(u64, Failure)> = Vec::new();
    for (_, p) in &results {
        *outcomes.entry(p.outcome).or_default() += 1;
        lane_dependent += usize::from(p.lane_order_dependent);
        for r in &p.rejected {
            *rejected.entry(r.clone()).or_default() += 1;
        }
        coverage.merge(&p.coverage);
        failures.extend(p.failures.iter().map(|f| (p.seed, f.clone())));
    }
    for (seed, arch, error) in &ptxas_failures {
        failures.push((*seed, Failure::new(format!("ptxas-{arch}"), error.clone())));
    }

    // Shrink and save the first failure of each kind.
    let mut saved = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (seed, failure) in &failures {
        if !seen.insert(failure.kind.clone()) || seen.len() > 6 {
            continue;
        }
        let case = generate(*seed, &config).case;
        let mut predicate = cpu_still_fails(&failure.kind, ptxas.clone(), true);
        if !predicate(&case) {
            continue;
        }
        let (small, stats) = fuzz::shrink::shrink(&case, &mut predicate, Default::default());
        let name = format!(
            "cpu-{}-{:016x}",
            failure.kind.split(':').next().unwrap_or("failure"),
            seed
        );
        let comments = format!(
            "found by tests/fuzz_codegen.rs (seed {seed:#x}); shrunk {:?} -> {:?} in {} evaluations\n{}: {}",
            stats.before, stats.after, stats.evaluations, failure.kind, failure.detail
        );
        match fuzz::case::save(&small, &name, &failure.kind, &comments) {
            Ok(path) => saved.push(path.display().to_string()),
            Err(e) => saved.push(format!("(not saved: {e})")),
        }
    }

    let total = start.elapsed();
    println!(
        "fuzz-codegen: {programs} programs (base seed {base:#x}) from {drafts} drafts: {:.1}% accepted by vyre's validator",
        100.0 * programs as f64 / drafts.max(1) as f64
    );
    println!(
        "  reference: {} ok, {} run-time errors, {} panics; {lane_dependent} lane-order dependent (discarded on the GPU)",
        outcomes.get("ok").unwrap_or(&0),
        outcomes.get("error").unwrap_or(&0),
        outcomes.get("panic").unwrap_or(&0)
    );
    println!(
        "  emitted: {} kernels for sm_80, {} for sm_90; {} rejected as unsupported {rejected:?}",
        assembled[0],
        assembled[1],
        rejected.values().sum::<usize>()
    );
    match &ptxas {
        Some(_) => println!(
            "  ptxas: {} kernels assembled, {} failed",
            assembled[0] + assembled[1],
            ptxas_failures.len()
        ),
        None => println!("  ptxas: not found, assembly skipped"),
    }
    println!(
        "  wall time: {:.1}s (generate + emit + reference {:.1}s, ptxas {:.1}s, {} threads)",
        total.as_secs_f64(),
        phase1.as_secs_f64(),
        phase2.as_secs_f64(),
        threads()
    );
    println!("  coverage:\n{}", coverage.summary());
    for (seed, f) in failures.iter().take(20) {
        println!(
            "  FAIL seed {seed:#x}: {}: {}",
            f.kind,
            f.detail.chars().take(600).collect::<String>()
        );
    }
    for path in &saved {
        println!("  saved {path}");
    }
    assert!(
        failures.is_empty(),
        "{} fuzz failures (first: {:?})",
        failures.len(),
        failures.first()
    );
}

/// Tooling: `SEED=0x.. cargo test --release --test fuzz_codegen -- --ignored shrink_seed`
/// shrinks one generated program whose kernel ptxas rejects or crashes on (for sm_90)
/// and saves it as a regression case.
#[test]
#[ignore]
fn shrink_seed() {
    let seed = std::env::var("SEED").expect("SEED=0x...");
    let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16).expect("hex seed");
    let ptxas = common::ptxas::require_ptxas();
    let kind = std::env::var("KIND").unwrap_or_else(|_| "ptxas-sm_90".into());
    let case = generate(seed, &GenConfig::default()).case;
    let mut predicate = cpu_still_fails(&kind, ptxas, true);
    assert!(predicate(&case), "seed {seed:#x} does not fail with {kind}");
    let budget = fuzz::shrink::Budget {
        max_time: std::time::Duration::from_secs(600),
        max_evaluations: 20000,
        ..Default::default()
    };
    let (small, stats) = fuzz::shrink::shrink(&case, &mut predicate, budget);
    let comments = format!(
        "found by tests/gpu_fuzz.rs (seed {seed:#x}); shrunk on the CPU {:?} -> {:?} in {} evaluations\n{kind}",
        stats.before, stats.after, stats.evaluations
    );
    let path =
        fuzz::case::save(&small, &format!("cpu-{kind}-{seed:016x}"), &kind, &comments).unwrap();
    println!(
        "saved {}\n{}",
        path.display(),
        fuzz::case::pretty(&small.program)
    );
}
