//! No-panic harness for the emitter: `vyre_cuda::codegen::emit_ptx` gets thousands of
//! arbitrary programs — untyped random trees over every IR variant, valid programs with
//! targeted breakages, deep nesting, and byte-mutated wire encodings decoded by vyre —
//! for several targets and workgroup overrides, and must always return `Ok` or an `Err`
//! whose `BackendError` carries `Fix:`; it must never panic.
//!
//! Panics are shrunk and saved under `tests/fuzz_regressions/`.
//! `VYRE_CUDA_FUZZ_NOPANIC_PROGRAMS` scales the run (default 60000 programs).

mod common;
#[path = "fuzz/mod.rs"]
mod fuzz;

use fuzz::arbitrary::{deep_program, mutated_program, random_program, wire_bytes, Arbitrary};
use fuzz::case::FuzzCase;
use fuzz::check::panic_key;
use fuzz::oracle::catch_quiet;
use fuzz::rng::program_seed;
use std::collections::BTreeMap;
use std::time::Instant;
use vyre_cuda::codegen::{emit_ptx, CodegenError, PtxIsa, PtxTarget};
use vyre_driver::{BackendError, DispatchConfig};
use vyre_foundation::ir::Program;

fn targets() -> Vec<PtxTarget> {
    let mut t = vec![PtxTarget::sm80(), PtxTarget::sm90()];
    if let Ok(old) = PtxTarget::new(70, PtxIsa::new(6, 4)) {
        t.push(old);
    }
    t
}

#[derive(Default)]
struct Tally {
    programs: u64,
    ok: u64,
    errors: BTreeMap<&'static str, u64>,
    panics: Vec<(String, Program, DispatchConfig, String)>,
    missing_fix: Vec<String>,
}

impl Tally {
    fn emit(&mut self, label: &str, program: &Program, config: &DispatchConfig) {
        self.programs += 1;
        for target in targets() {
            match catch_quiet(|| emit_ptx(program, config.workgroup_override, target)) {
                Ok(Ok(kernel)) => {
                    self.ok += 1;
                    assert!(!kernel.ptx.contains('\0'), "{label}: NUL in PTX");
                }
                Ok(Err(error)) => {
                    let class = match &error {
                        CodegenError::Unsupported { .. } => "unsupported",
                        CodegenError::Invalid { .. } => "invalid",
                        CodegenError::Target { .. } => "target",
                    };
                    *self.errors.entry(class).or_default() += 1;
                    let text = BackendError::from(vyre_cuda::CudaError::from(error)).to_string();
                    if text.matches("Fix:").count() != 1 && self.missing_fix.len() < 20 {
                        self.missing_fix.push(format!("{label}: {text}"));
                    }
                }
                Err(panic) => {
                    if self.panics.len() < 50 {
                        self.panics.push((
                            label.to_string(),
                            program.clone(),
                            config.clone(),
                            panic,
                        ));
                    }
                    return;
                }
            }
        }
    }
}

fn count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn the_emitter_never_panics_on_arbitrary_programs() {
    let total = count("VYRE_CUDA_FUZZ_NOPANIC_PROGRAMS", 60000);
    let base = 0xA4B1_7A4Au64;
    let start = Instant::now();
    let mut tally = Tally::default();
    let (mut decoded, mut undecodable, mut decoder_panics) = (0u64, 0u64, 0u64);
    let (mut validator_panics, mut valid) = (0u64, 0u64);
    for i in 0..total {
        let seed = program_seed(base, i);
        let arbitrary: Option<Arbitrary> = match i % 10 {
            0..=3 => Some(random_program(seed)),
            4..=7 => Some(mutated_program(seed)),
            8 if i % 100 == 8 => Some(deep_program(seed)),
            _ => {
                let bytes = wire_bytes(seed);
                match catch_quiet(|| Program::from_wire(&bytes)) {
                    Ok(Ok(program)) => {
                        decoded += 1;
                        Some(Arbitrary {
                            program,
                            config: DispatchConfig::default(),
                            origin: "wire",
                        })
                    }
                    Ok(Err(_)) => {
                        undecodable += 1;
                        None
                    }
                    Err(_) => {
                        decoder_panics += 1;
                        None
                    }
                }
            }
        };
        let Some(a) = arbitrary else { continue };
        match catch_quiet(|| fuzz::oracle::validate(&a.program)) {
            Ok(Ok(())) => valid += 1,
            Ok(Err(_)) => {}
            Err(_) => validator_panics += 1,
        }
        tally.emit(
            &format!("{} seed {seed:#x}", a.origin),
            &a.program,
            &a.config,
        );
    }

    // Shrink and save the first panic of each kind.
    let mut saved = Vec::new();
    let mut kinds = std::collections::BTreeSet::new();
    for (label, program, config, panic) in &tally.panics {
        let key = panic_key(panic);
        if !kinds.insert(key.clone()) {
            continue;
        }
        let case = FuzzCase {
            seed: 0,
            program: program.clone(),
            inputs: Vec::new(),
            config: config.clone(),
        };
        let mut predicate = |c: &FuzzCase| {
            targets().into_iter().any(|t| {
                matches!(catch_quiet(|| emit_ptx(&c.program, c.config.workgroup_override, t)), Err(p) if panic_key(&p) == key)
            })
        };
        let (small, _) = fuzz::shrink::shrink(&case, &mut predicate, Default::default());
        let comments = format!("emit_ptx panics ({label}): {panic}");
        let name = format!("emitter-panic-{:08x}", saved.len() as u32 ^ 0x5eed);
        match fuzz::case::save(&small, &name, "emitter-panic", &comments) {
            Ok(p) => saved.push(p.display().to_string()),
            Err(e) => saved.push(format!("(not saved: {e}) {:?}", small.program)),
        }
    }

    println!(
        "fuzz-nopanic: {} programs ({valid} pass vyre's validator) x {} targets in {:.1}s: {} kernels, errors {:?}, {} panics, {} errors without Fix:",
        tally.programs,
        targets().len(),
        start.elapsed().as_secs_f64(),
        tally.ok,
        tally.errors,
        tally.panics.len(),
        tally.missing_fix.len()
    );
    println!(
        "fuzz-nopanic: wire decoder: {decoded} mutated encodings decoded, {undecodable} rejected, {decoder_panics} decoder panics (vyre-foundation); {validator_panics} validator panics (vyre-foundation)"
    );
    for (label, _, _, panic) in &tally.panics {
        println!("  PANIC {label}: {}", panic_key(panic));
    }
    for path in &saved {
        println!("  saved {path}");
    }
    for m in &tally.missing_fix {
        println!("  NO FIX: {m}");
    }
    assert!(
        tally.panics.is_empty(),
        "the emitter panicked {} times",
        tally.panics.len()
    );
    assert!(
        tally.missing_fix.is_empty(),
        "errors without Fix: {:?}",
        tally.missing_fix
    );
}
