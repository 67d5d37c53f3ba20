//! PTX snapshots: an emitter change reviews as a diff.
//!
//! * `tests/snapshots/ptx/*.ptx`: the full sm_90 text of every module the runtime loads
//!   for ~50 representative programs (grid-sync, runtime kernels, every eighth semantic
//!   case, every tenth corpus fixture).
//! * `tests/snapshots/ptx-digests.txt`: one blake3 per program and target over every
//!   semantic case, corpus fixture, grid program, saved fuzz regression and 400 generated
//!   fuzz programs (default and large shape), for sm_80 and sm_90. A rejection is
//!   recorded by its message, so refusals stay identical too.
//!
//! `VYRE_CUDA_UPDATE_SNAPSHOTS=1 cargo test --release --test ptx_snapshots` rewrites both
//! after an intended change; the git diff is then the review.

mod common;
#[path = "fuzz/mod.rs"]
mod fuzz;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use vyre_cuda::codegen::{emit_ptx, PtxTarget};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::Program;

struct Subject {
    name: String,
    program: Program,
    config: DispatchConfig,
    /// Full text checked in, not only a digest.
    snapshot: bool,
}

fn subject(name: String, program: Program, config: DispatchConfig, snapshot: bool) -> Subject {
    Subject {
        name: name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect(),
        program,
        config,
        snapshot,
    }
}

fn subjects() -> Vec<Subject> {
    let mut all = Vec::new();
    for case in common::grid_programs::all() {
        all.push(subject(
            format!("grid-{}", case.name),
            case.program,
            DispatchConfig::default(),
            true,
        ));
    }
    let kernels = [
        ("kernel-vadd", common::kernels::vadd(4096, 7)),
        ("kernel-affine", common::kernels::affine(3, 5, 128)),
        ("kernel-accumulate", common::kernels::accumulate()),
        ("kernel-signed-div", common::kernels::signed_div(1024)),
        ("kernel-vadd-in-order", common::kernels::vadd_in_order(1024)),
    ];
    for (name, program) in kernels {
        all.push(subject(
            name.into(),
            program,
            DispatchConfig::default(),
            true,
        ));
    }
    for (index, case) in common::programs::all_cases().into_iter().enumerate() {
        let name = format!("semantic-{:03}-{}", index, case.name);
        all.push(subject(name, case.program, case.config, index % 8 == 0));
    }
    // Sorted by id: inventory's registration order differs between debug and release.
    let mut fixtures = common::corpus::fixtures();
    fixtures.sort_by_key(|fixture| fixture.id);
    for (index, fixture) in fixtures.into_iter().enumerate() {
        let name = format!("corpus-{}", fixture.id);
        let program = (fixture.build)();
        all.push(subject(
            name,
            program,
            DispatchConfig::default(),
            index % 10 == 0,
        ));
    }
    let saved = fuzz::case::load_dir(&fuzz::case::regression_dir()).expect("regression cases");
    for case in saved {
        let file = case
            .path
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        all.push(subject(
            format!("regression-{file}"),
            case.case.program,
            case.case.config,
            false,
        ));
    }
    for (shape, config) in [
        ("default", fuzz::gen::GenConfig::default()),
        ("large", fuzz::gen::GenConfig::large()),
    ] {
        for seed in 0..200u64 {
            let case = fuzz::gen::generate(0x5eed_0000 + seed, &config).case;
            let name = format!("fuzz-{shape}-{seed:03}");
            all.push(subject(name, case.program, case.config, false));
        }
    }
    all
}

fn render(subject: &Subject, target: PtxTarget) -> String {
    match emit_ptx(&subject.program, subject.config.workgroup_override, target) {
        Ok(kernel) => {
            let mut text = String::new();
            for (index, module) in fuzz::check::loaded_modules(&kernel).iter().enumerate() {
                let _ = writeln!(text, "//// module {index}");
                text.push_str(module);
            }
            let _ = writeln!(text, "//// abi {:?}", kernel.abi);
            text
        }
        Err(error) => format!("//// rejected: {error}\n"),
    }
}

fn snapshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots")
}

fn updating() -> bool {
    std::env::var("VYRE_CUDA_UPDATE_SNAPSHOTS").is_ok_and(|v| v == "1")
}

#[test]
fn emitted_ptx_matches_the_checked_in_snapshots() {
    let dir = snapshot_dir();
    let mut digests = String::new();
    let mut snapshots = BTreeMap::new();
    let subjects = subjects();
    for subject in &subjects {
        for target in [PtxTarget::sm80(), PtxTarget::sm90()] {
            let text = render(subject, target);
            let _ = writeln!(
                digests,
                "{} sm_{} {}",
                subject.name,
                target.sm(),
                blake3::hash(text.as_bytes()).to_hex()
            );
            if subject.snapshot && target == PtxTarget::sm90() {
                snapshots.insert(format!("{}.ptx", subject.name), text);
            }
        }
    }
    let digest_path = dir.join("ptx-digests.txt");
    if updating() {
        let ptx_dir = dir.join("ptx");
        let _ = std::fs::remove_dir_all(&ptx_dir);
        std::fs::create_dir_all(&ptx_dir).unwrap();
        for (file, text) in &snapshots {
            std::fs::write(ptx_dir.join(file), text).unwrap();
        }
        std::fs::write(&digest_path, &digests).unwrap();
        eprintln!(
            "rewrote {} snapshots and {} digests",
            snapshots.len(),
            subjects.len() * 2
        );
        return;
    }
    let mut failures = Vec::new();
    for (file, text) in &snapshots {
        match std::fs::read_to_string(dir.join("ptx").join(file)) {
            Ok(expected) if &expected == text => {}
            Ok(_) => failures.push(format!("snapshot {file} differs")),
            Err(_) => failures.push(format!("snapshot {file} is missing")),
        }
    }
    let expected = std::fs::read_to_string(&digest_path).unwrap_or_default();
    let expected: BTreeMap<&str, &str> = expected
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .collect();
    let actual: BTreeMap<&str, &str> = digests.lines().filter_map(|l| l.rsplit_once(' ')).collect();
    for (key, hash) in &actual {
        match expected.get(key) {
            Some(old) if old == hash => {}
            Some(_) => failures.push(format!("digest of {key} differs")),
            None => failures.push(format!("no recorded digest for {key}")),
        }
    }
    for key in expected.keys().filter(|k| !actual.contains_key(*k)) {
        failures.push(format!("recorded digest for {key} has no program"));
    }
    eprintln!(
        "{} programs x 2 targets, {} full snapshots",
        subjects.len(),
        snapshots.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} PTX records changed (rerun with VYRE_CUDA_UPDATE_SNAPSHOTS=1 after an \
         intended change and review the diff):\n{}",
        failures.len(),
        actual.len() + snapshots.len(),
        failures[..failures.len().min(60)].join("\n")
    );
}

/// The fuzz checker's gates for ptxas miscompilations (`fuzz::check::ptxas_hazard`: no
/// warp-synchronous operand ptxas can see through, no i32 min/max of another's result, no
/// warp-synchronous instruction a vote-steered branch skips), over every semantic, corpus
/// and library kernel too.
#[test]
fn every_kernel_keeps_the_ptxas_workarounds() {
    let mut failures = Vec::new();
    for subject in subjects() {
        for target in [PtxTarget::sm80(), PtxTarget::sm90()] {
            let Ok(kernel) = emit_ptx(&subject.program, subject.config.workgroup_override, target)
            else {
                continue;
            };
            for module in fuzz::check::loaded_modules(&kernel) {
                if let Some(hazard) = fuzz::check::ptxas_hazard(&module) {
                    failures.push(format!(
                        "{} sm_{}: {}: {}",
                        subject.name,
                        target.sm(),
                        hazard.what,
                        hazard.line
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
