//! CI mode of the differential fuzzer (no GPU needed): generate a few thousand random
//! valid Programs from fixed seeds, emit PTX for sm_80 and sm_90, assemble every module
//! the runtime would load (the vector entry's module too) with the pinned CUDA 13 ptxas
//! (and those of every fourth program with the CUDA 12 one) at their default
//! optimisation level, run vyre-reference (forward
//! and lane-reversed) on each, and assert that nothing panics, every kernel assembles
//! (a ptxas crash is narrowed to its kernel and reported), and every rejection carries
//! `Fix:`. Failures are shrunk and saved under `tests/fuzz_regressions/`.
//!
//! Four shapes run: the default one (28 statements, expression depth 3), the large one
//! of `GenConfig::large` (48 statements, depth 6, literal-only conditions and division
//! operands, cast chains, libm calls), which reaches programs like
//! `../shared/regressions/ptxas-crash-1`, and the replicated one of
//! `GenConfig::replicated` (every invocation the same computation, updating the same slots
//! in place: the kernels one thread runs in the reference's order), and issue 17's
//! complete one of `GenConfig::complete` (the large shape plus every construct the
//! reference runs and the emitter does not lower yet). For the complete shape,
//! rejections are not failures (they are issue 17's to-do list): the sweep prints, per
//! construct, how many programs held it and which construct names the emitter rejected
//! them with; panics, `Fix:`-less errors, kernels ptxas cannot assemble and kernels for
//! programs on which the reference fails to read a lane at another step (a subgroup
//! operand, `check::missed_timing_error`) still fail it.
//!
//! `VYRE_CUDA_FUZZ_CI_PROGRAMS` (default 1000), `VYRE_CUDA_FUZZ_CI_LARGE_PROGRAMS`
//! (default 300), `VYRE_CUDA_FUZZ_CI_REPLICATED_PROGRAMS` (default 400) and
//! `VYRE_CUDA_FUZZ_COMPLETE_PROGRAMS` (default 600) set the
//! program counts, `VYRE_CUDA_FUZZ_SEED` the base seed (the other shapes use it xor a
//! constant). The counts keep the sweep near seven minutes on CI's two cores, almost all
//! of it ptxas at -O3 (about 0.1 s a program of the default and replicated shapes, 0.25 s
//! of the complete one and 0.55 s of the large one, both targets); the GPU sweep of
//! `tests/gpu_fuzz.rs` runs tens of thousands each session.

mod common;
use common::ptxas_batch::{assemble_with_each, Kernel};
#[path = "fuzz/mod.rs"]
mod fuzz;

use fuzz::check::{cpu_check, cpu_still_fails, Failure};
use fuzz::coverage::{unlowered_constructs, Coverage, RARE, UNLOWERED};
use fuzz::gen::{generate, GenConfig};
use fuzz::oracle::{judge, Outcome};
use fuzz::rng::program_seed;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// A debug build (plain `cargo test`) sweeps a tenth of the programs: generating and
/// emitting them unoptimised is ~10x slower, and the release run of `scripts/test.sh`
/// sweeps them all.
const SWEEP_DIVISOR: usize = if cfg!(debug_assertions) { 10 } else { 1 };
const DEFAULT_PROGRAMS: usize = 1000 / SWEEP_DIVISOR;
const DEFAULT_SEED: u64 = 0x5EED_C0DE_2024;
const DEFAULT_LARGE_PROGRAMS: usize = 300 / SWEEP_DIVISOR;
/// The large shape's seeds differ from the default shape's.
const LARGE_SEED_XOR: u64 = 0x1A96_E000;
const DEFAULT_REPLICATED_PROGRAMS: usize = 400 / SWEEP_DIVISOR;
const REPLICATED_SEED_XOR: u64 = 0x5A3E_0000;
/// Enough programs that every rare construct is expected (see the test).
const DEFAULT_COMPLETE_PROGRAMS: usize = 600 / SWEEP_DIVISOR;
const COMPLETE_SEED_XOR: u64 = 0xC0A1_7E00;
/// Every this many programs, the modules are also assembled with the CUDA 12 ptxas.
const CU12_SAMPLE: usize = 4;

struct Program {
    seed: u64,
    drafts: u32,
    outcome: &'static str,
    lane_order_dependent: bool,
    failures: Vec<Failure>,
    kernels: Vec<Option<Vec<String>>>,
    rejected: Vec<String>,
    coverage: Coverage,
    /// Issue 17's constructs in the program (`coverage::unlowered_constructs`).
    constructs: BTreeSet<&'static str>,
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
    sweep("default", &GenConfig::default(), programs, base);
}

#[test]
fn fuzz_codegen_large_programs_emit_assemble_and_never_panic() {
    let programs = env_or("VYRE_CUDA_FUZZ_CI_LARGE_PROGRAMS", DEFAULT_LARGE_PROGRAMS);
    let base = env_or("VYRE_CUDA_FUZZ_SEED", DEFAULT_SEED) ^ LARGE_SEED_XOR;
    sweep("large", &GenConfig::large(), programs, base);
}

#[test]
fn fuzz_codegen_replicated_programs_emit_assemble_and_never_panic() {
    let programs = env_or(
        "VYRE_CUDA_FUZZ_CI_REPLICATED_PROGRAMS",
        DEFAULT_REPLICATED_PROGRAMS,
    );
    let base = env_or("VYRE_CUDA_FUZZ_SEED", DEFAULT_SEED) ^ REPLICATED_SEED_XOR;
    sweep("replicated", &GenConfig::replicated(), programs, base);
}

/// Issue 17's gate on the CPU: every construct the reference runs and the emitter does
/// not lower yet is generated (each must appear in the sweep), nothing panics, and every
/// kernel the emitter accepts assembles. Rejections are reported per construct, not
/// failed.
#[test]
fn fuzz_codegen_complete_programs_emit_assemble_and_never_panic() {
    let programs = env_or(
        "VYRE_CUDA_FUZZ_COMPLETE_PROGRAMS",
        DEFAULT_COMPLETE_PROGRAMS,
    );
    let base = env_or("VYRE_CUDA_FUZZ_SEED", DEFAULT_SEED) ^ COMPLETE_SEED_XOR;
    let held = sweep("complete", &GenConfig::complete(), programs, base);
    // The rarest construct is in about 7% of the programs: from 150 programs on (the
    // debug default) every one is expected, whatever the seed (a miss has odds of about
    // 1 in 50000 per construct); a smaller sweep checks nothing here. The rare ones (about
    // 2%) are expected from 600 programs on (a miss: about 1 in 180000 per construct).
    if programs >= 150 {
        let missing: Vec<&str> = UNLOWERED
            .iter()
            .copied()
            .filter(|c| !held.contains_key(c) && (programs >= 600 || !RARE.contains(c)))
            .collect();
        assert!(
            missing.is_empty(),
            "the complete shape generated no program with {missing:?} in {programs} programs"
        );
    }
}

/// Runs the sweep; returns, per issue 17 construct, how many programs held it.
fn sweep(
    shape: &str,
    config: &GenConfig,
    programs: usize,
    base: u64,
) -> BTreeMap<&'static str, usize> {
    let ptxas = common::ptxas::require_ptxas();
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
                let generated = generate(seed, config);
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
                let constructs = unlowered_constructs(&case.program);
                let program = Program {
                    seed,
                    drafts: generated.rejected_drafts + 1,
                    outcome: verdict.outcome.label(),
                    lane_order_dependent: verdict.lane_order_dependent,
                    failures,
                    kernels,
                    rejected,
                    coverage,
                    constructs,
                };
                results.lock().unwrap().push((i, program));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, _)| *i);
    let phase1 = start.elapsed();

    // Phase 2: assemble every module the runtime loads, batched, for both targets, in
    // parallel: all with the pinned CUDA 13 ptxas, those of every CU12_SAMPLE-th program
    // with the CUDA 12 one too.
    let mut assembled = [0usize; 2];
    for (t, count) in assembled.iter_mut().enumerate() {
        *count = results
            .iter()
            .filter(|(_, p)| p.kernels[t].is_some())
            .count();
    }
    let (mut kernels, mut cu12_kernels) = (Vec::new(), Vec::new());
    for (i, p) in &results {
        for ptx in p.kernels.iter().flatten().flatten() {
            let kernel = Kernel {
                id: format!("{:#x}", p.seed),
                ptx: ptx.clone(),
            };
            if i % CU12_SAMPLE == 0 {
                cu12_kernels.push(kernel.clone());
            }
            kernels.push(kernel);
        }
    }
    let modules_assembled = [kernels.len(), cu12_kernels.len()];
    let mut refused = Vec::new();
    let mut labels = Vec::new();
    if let Some(ptxas) = &ptxas {
        let compilers = common::ptxas_batch::compilers(ptxas);
        let (cuda13, cuda12) = compilers.split_at(1);
        refused = assemble_with_each(cuda13, &kernels, &[]);
        refused.extend(assemble_with_each(cuda12, &cu12_kernels, &[]));
        labels = compilers.iter().map(|(label, _)| *label).collect();
    }
    let ptxas_failures: Vec<(u64, String, String)> = refused
        .into_iter()
        .map(|r| {
            let seed = u64::from_str_radix(r.id.trim_start_matches("0x"), 16).unwrap_or(0);
            let kind = match r.compiler {
                "cuda13" => r.arch,
                other => format!("{}-{other}", r.arch),
            };
            (seed, kind, r.error)
        })
        .collect();
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
        let case = generate(*seed, config).case;
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
        "fuzz-codegen ({shape} shape): {programs} programs (base seed {base:#x}) from {drafts} drafts: {:.1}% accepted by vyre's validator",
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
            "  ptxas ({}): {} modules assembled at the default -O3 ({} of them also with CUDA 12's where it reads them), {} failed",
            labels.join(" + "),
            modules_assembled[0],
            modules_assembled[1],
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
    let held = construct_table(&results);
    assert!(
        failures.is_empty(),
        "{} fuzz failures (first: {:?})",
        failures.len(),
        failures.first()
    );
    held
}

/// Prints, per issue 17 construct, how many programs held it, how the reference ran
/// them, and how many the emitter rejected with which construct name (a program counts
/// once per name, whichever target rejected it); returns the programs per construct.
fn construct_table(results: &[(usize, Program)]) -> BTreeMap<&'static str, usize> {
    #[derive(Default)]
    struct Row {
        programs: usize,
        reference_errors: usize,
        rejected: usize,
        by: BTreeMap<String, usize>,
    }
    let mut rows: BTreeMap<&'static str, Row> = BTreeMap::new();
    for (_, p) in results {
        let names: BTreeSet<&String> = p.rejected.iter().collect();
        let keys: Vec<&'static str> = if p.constructs.is_empty() {
            vec!["(none of these)"]
        } else {
            p.constructs.iter().copied().collect()
        };
        for key in keys {
            let row = rows.entry(key).or_default();
            row.programs += 1;
            row.reference_errors += usize::from(p.outcome == "error");
            if !names.is_empty() {
                row.rejected += 1;
            }
            for name in &names {
                *row.by.entry((*name).clone()).or_default() += 1;
            }
        }
    }
    let held = rows
        .iter()
        .filter(|(k, _)| UNLOWERED.contains(k))
        .map(|(k, r)| (*k, r.programs))
        .collect();
    if rows.keys().all(|k| *k == "(none of these)") {
        return held;
    }
    let total = results.len().max(1);
    println!("  issue 17 constructs (programs holding it, share, reference run-time errors, rejected by the emitter: by construct name):");
    let order = UNLOWERED.iter().copied().chain(["(none of these)"]);
    for key in order {
        let Some(r) = rows.get(key) else {
            println!("    {key:<36} 0");
            continue;
        };
        let by: Vec<String> = r.by.iter().map(|(n, c)| format!("{c} {n:?}")).collect();
        println!(
            "    {key:<36} {:>5} {:>5.1}%  ref-errors {:>4}  rejected {:>5} ({:>5.1}%): {}",
            r.programs,
            100.0 * r.programs as f64 / total as f64,
            r.reference_errors,
            r.rejected,
            100.0 * r.rejected as f64 / r.programs.max(1) as f64,
            by.join(", ")
        );
    }
    held
}

/// Tooling: `SEED=0x.. cargo test --release --test fuzz_codegen -- --ignored shrink_seed`
/// shrinks one generated program whose kernel ptxas rejects or crashes on (for sm_90),
/// or, with `CASE=path/to/file.case` instead of `SEED`, a saved case; the result is saved
/// as a regression case.
#[test]
#[ignore]
fn shrink_seed() {
    let ptxas = common::ptxas::require_ptxas();
    let kind = std::env::var("KIND").unwrap_or_else(|_| "ptxas-sm_90".into());
    let (case, origin) = match std::env::var("CASE") {
        Ok(path) => {
            let text = std::fs::read_to_string(&path).expect("CASE file");
            let saved = fuzz::case::parse(std::path::Path::new(&path), &text).expect("case");
            (saved.case, path)
        }
        Err(_) => {
            let seed = std::env::var("SEED").expect("SEED=0x... or CASE=file");
            let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16).expect("hex seed");
            let shape = std::env::var("SHAPE").unwrap_or_else(|_| "default".into());
            let config =
                GenConfig::named(&shape).expect("SHAPE=default, large, replicated or complete");
            (
                generate(seed, &config).case,
                format!("seed {seed:#x} ({shape} shape)"),
            )
        }
    };
    let seed = case.seed;
    let mut predicate = cpu_still_fails(&kind, ptxas, true);
    assert!(predicate(&case), "{origin} does not fail with {kind}");
    let budget = fuzz::shrink::Budget {
        max_time: std::time::Duration::from_secs(600),
        max_evaluations: 20000,
        ..Default::default()
    };
    let (small, stats) = fuzz::shrink::shrink(&case, &mut predicate, budget);
    let comments = format!(
        "shrunk from {origin} on the CPU {:?} -> {:?} in {} evaluations\n{kind}",
        stats.before, stats.after, stats.evaluations
    );
    let name = std::env::var("NAME").unwrap_or_else(|_| format!("cpu-{kind}-{seed:016x}"));
    let path = fuzz::case::save(&small, &name, &kind, &comments).unwrap();
    println!(
        "saved {}\n{}",
        path.display(),
        fuzz::case::pretty(&small.program)
    );
}

/// Tooling: `CASE=path/to/file.case OUT=dir cargo test --release --test fuzz_codegen --
/// --ignored dump_case_ptx` writes the case's kernel for sm_80 and sm_90 to
/// `<OUT>/<case>.sm_NN.ptx` (for reducing a ptxas failure by hand).
#[test]
#[ignore]
fn dump_case_ptx() {
    let path = std::env::var("CASE").expect("CASE=file");
    let out = std::path::PathBuf::from(std::env::var("OUT").expect("OUT=dir"));
    let text = std::fs::read_to_string(&path).expect("CASE file");
    let saved = fuzz::case::parse(std::path::Path::new(&path), &text).expect("case");
    let stem = saved
        .path
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    for (target, arch) in fuzz::check::targets() {
        let kernel = vyre_cuda::codegen::emit_ptx(
            &saved.case.program,
            saved.case.config.workgroup_override,
            target,
        )
        .expect("emit");
        for (index, ptx) in kernel.modules().enumerate() {
            let file = match index {
                0 => out.join(format!("{stem}.{arch}.ptx")),
                _ => out.join(format!("{stem}.{arch}.{index}.ptx")),
            };
            std::fs::write(&file, ptx).expect("write");
            println!("wrote {}", file.display());
        }
    }
}
