//! `corpus_first` and `corpus_warm`: every fixture case of vyre-primitives and
//! vyre-libs end to end: the first (cold) pass, and the median of warm passes; sums
//! over the cases every engine matched. The floor has no kernels for it.

use crate::check::Expect;
use crate::engines::Engine;
use crate::harness::{Ctx, Sink};
use crate::programs;
use crate::report::{fmt_time, Outcome, Row, Stats};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::time::Instant;
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::Program;

/// Fixture inputs: cases x buffers x bytes.
type InputsFn = fn() -> Vec<Vec<Vec<u8>>>;

pub struct Fixture {
    pub id: &'static str,
    pub build: fn() -> Program,
    pub inputs: Option<InputsFn>,
}

// vyre-primitives and vyre-libs register their operations only when they are linked.
use vyre_libs as _;
use vyre_primitives as _;

/// The operations vyre-libs' `nn-attention` feature registers. The harness enables that
/// feature for its `libs_` attention workloads (softmax, flash attention, quest paging)
/// only; the corpus leaves these out, so it stays the corpus of vyre-libs' default
/// features that every earlier run measured (a unit test checks the list is exact).
pub const NN_ATTENTION_OPS: [&str; 9] = [
    "vyre-libs::nn::attention",
    "vyre-libs::nn::attention::quest_paging",
    "vyre-libs::nn::attention::turboquant",
    "vyre-libs::nn::attention_reference",
    "vyre-libs::nn::flash_attention",
    "vyre-libs::nn::gqa_attention",
    "vyre-libs::nn::partial_rope",
    "vyre-libs::nn::qk_gain",
    "vyre-libs::nn::softmax",
];

/// Every operation with a program builder in vyre's `OperationRegistry` as linked here:
/// vyre-primitives (features `inventory-registry`, `all-lego`), vyre-libs (its default
/// features: [`NN_ATTENTION_OPS`] are left out) and vyre-foundation's own, sorted by id.
/// (vyre-intrinsics 0.7.1 does not build against vyre 0.7.2 and is left out.)
pub fn corpus() -> Vec<Fixture> {
    let mut fixtures: Vec<Fixture> = vyre_foundation::operation::OperationRegistry::global()
        .iter()
        .filter(|e| !NN_ATTENTION_OPS.contains(&e.id))
        .filter_map(|e| {
            Some(Fixture {
                id: e.id,
                build: e.build?,
                inputs: e.test_inputs,
            })
        })
        .collect();
    fixtures.sort_by_key(|f| f.id);
    fixtures
}

struct Case {
    program: usize,
    inputs: Vec<Vec<u8>>,
    want: Result<Vec<Vec<u8>>, String>,
}

// A case's status per engine.
const MATCHED: u8 = 0;
const MISMATCHED: u8 = 1;
/// The engine erred, the reference did not.
const REJECTED: u8 = 2;
/// Both erred.
const BOTH_FAIL: u8 = 3;

/// What the passes found, per engine (in `Engines::vyre` order) and case.
struct Passes {
    status: Vec<Vec<u8>>,
    /// The first pass's wall (ns).
    first: Vec<Vec<f64>>,
    /// Each warm pass's wall (ns), per case; matched cases only.
    warm: Vec<Vec<Vec<f64>>>,
    /// The cases every engine matched.
    common: Vec<usize>,
    passes: usize,
}

pub fn run(ctx: &Ctx, sink: &mut Sink) {
    let fixtures = corpus();
    let programs: Vec<Program> = fixtures.iter().map(|f| (f.build)()).collect();
    let cases = cases(&fixtures, &programs);
    let engines = ctx.engines.vyre();
    // Each engine's configuration per program (what its users must pass), made before
    // any timing.
    let configs: Configs = engines
        .iter()
        .map(|e| {
            programs
                .iter()
                .map(|p| e.config_for(p, &ctx.config))
                .collect()
        })
        .collect();
    // One output vector for every dispatch of both passes.
    let mut out = Vec::new();
    let (status, first) = first_pass(&engines, &programs, &configs, &cases, &mut out);
    let common: Vec<usize> = (0..cases.len())
        .filter(|&ci| (0..engines.len()).all(|ei| status[ei][ci] == MATCHED))
        .collect();
    let passes = ctx.samples(30);
    let warm = warm_passes(
        &engines, &programs, &configs, &cases, &status, passes, &mut out,
    );
    let found = Passes {
        status,
        first,
        warm,
        common,
        passes,
    };
    // Where the first pass goes: the common cases vyre-cuda spends longest on.
    let mut slowest: Vec<usize> = found.common.clone();
    slowest.sort_by(|&x, &y| found.first[0][y].total_cmp(&found.first[0][x]));
    for &ci in slowest.iter().take(12) {
        sink.log(format!(
            "corpus_first case {}: vyre-cuda {} | incumbent {}",
            fixtures[cases[ci].program].id,
            fmt_time(found.first[0][ci]),
            fmt_time(found.first[1][ci])
        ));
    }
    let (mut first_row, mut warm_row) = rows(&engines, &fixtures, &cases, &found);
    for (ei, engine) in engines.iter().enumerate() {
        let Some(needs) = engine.config_needs() else {
            continue;
        };
        let adjusted = configs[ei].iter().filter(|&c| *c != ctx.config).count();
        let note = format!(
            "{}: {adjusted} of {} programs dispatched with {needs}",
            engine.name(),
            programs.len()
        );
        first_row.notes.push(note.clone());
        warm_row.notes.push(note);
    }
    sink.push(first_row);
    sink.push(warm_row);
}

/// Every fixture case with the reference's outputs (or its error).
fn cases(fixtures: &[Fixture], programs: &[Program]) -> Vec<Case> {
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
    cases
}

/// Per engine (in `Engines::vyre` order) and program: the `DispatchConfig` it runs with.
type Configs = Vec<Vec<DispatchConfig>>;

/// The first pass, engine after engine: each case's status and wall.
fn first_pass(
    engines: &[&dyn Engine],
    programs: &[Program],
    configs: &Configs,
    cases: &[Case],
    out: &mut Vec<Vec<u8>>,
) -> (Vec<Vec<u8>>, Vec<Vec<f64>>) {
    let mut status = vec![vec![0u8; cases.len()]; engines.len()];
    let mut first = vec![vec![0f64; cases.len()]; engines.len()];
    for (ei, &e) in engines.iter().enumerate() {
        for (ci, case) in cases.iter().enumerate() {
            let borrowed: Vec<&[u8]> = case.inputs.iter().map(Vec::as_slice).collect();
            let started = Instant::now();
            let got = std::panic::catch_unwind(AssertUnwindSafe(|| {
                e.dispatch(
                    &programs[case.program],
                    &borrowed,
                    &configs[ei][case.program],
                    out,
                )
            }))
            .unwrap_or_else(|_| Err("panicked".into()));
            first[ei][ci] = started.elapsed().as_secs_f64() * 1e9;
            status[ei][ci] = match (&case.want, got) {
                (Ok(want), Ok(())) => {
                    if Expect::Full(want.clone()).check(out).is_ok() {
                        MATCHED
                    } else {
                        MISMATCHED
                    }
                }
                (Ok(_), Err(_)) => REJECTED,
                (Err(_), Err(_)) => BOTH_FAIL,
                (Err(_), Ok(())) => MISMATCHED,
            };
        }
    }
    (status, first)
}

/// `passes` warm passes, engines in turn within each pass, matched cases only.
fn warm_passes(
    engines: &[&dyn Engine],
    programs: &[Program],
    configs: &Configs,
    cases: &[Case],
    status: &[Vec<u8>],
    passes: usize,
    out: &mut Vec<Vec<u8>>,
) -> Vec<Vec<Vec<f64>>> {
    let mut warm = vec![vec![vec![0f64; passes]; cases.len()]; engines.len()];
    #[allow(clippy::needless_range_loop)]
    for pass in 0..passes {
        for (ei, &e) in engines.iter().enumerate() {
            for (ci, case) in cases.iter().enumerate() {
                if status[ei][ci] != MATCHED {
                    continue;
                }
                let borrowed: Vec<&[u8]> = case.inputs.iter().map(Vec::as_slice).collect();
                let started = Instant::now();
                let config = &configs[ei][case.program];
                let _ = e.dispatch(&programs[case.program], &borrowed, config, out);
                warm[ei][ci][pass] = started.elapsed().as_secs_f64() * 1e9;
            }
        }
    }
    warm
}

/// The `corpus_first` and `corpus_warm` rows.
fn rows(
    engines: &[&dyn Engine],
    fixtures: &[Fixture],
    cases: &[Case],
    found: &Passes,
) -> (Row, Row) {
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
        let (first, warm) = outcomes(ei, fixtures, cases, found);
        first_row.engines.insert(e.name().into(), first);
        warm_row.engines.insert(e.name().into(), warm);
    }
    let summary = engines
        .iter()
        .enumerate()
        .map(|(ei, e)| {
            let c = |s: u8| found.status[ei].iter().filter(|&&x| x == s).count();
            format!(
                "{}: {} matched, {} mismatched, {} rejected, {} failing like the reference",
                e.name(),
                c(MATCHED),
                c(MISMATCHED),
                c(REJECTED),
                c(BOTH_FAIL)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    for row in [&mut first_row, &mut warm_row] {
        row.notes.push(format!(
            "{} cases from {} programs; sums over the {} cases every engine matched; {summary}",
            cases.len(),
            fixtures.len(),
            found.common.len()
        ));
    }
    first_row
        .notes
        .push("one sample: the first pass is the only cold one".into());
    (first_row, warm_row)
}

/// Engine `ei`'s first-pass and warm outcomes: sums over the common cases, with its counts.
fn outcomes(ei: usize, fixtures: &[Fixture], cases: &[Case], found: &Passes) -> (Outcome, Outcome) {
    let status = &found.status[ei];
    let count = |s: u8| status.iter().filter(|&&x| x == s).count() as f64;
    let mut extra = BTreeMap::new();
    extra.insert("cases".into(), cases.len() as f64);
    extra.insert("matched".into(), count(MATCHED));
    extra.insert("mismatched".into(), count(MISMATCHED));
    extra.insert("rejected".into(), count(REJECTED));
    extra.insert("both_fail".into(), count(BOTH_FAIL));
    extra.insert("common_cases".into(), found.common.len() as f64);
    let warm = &found.warm[ei];
    let own: Vec<usize> = (0..cases.len())
        .filter(|&ci| status[ci] == MATCHED)
        .collect();
    let mut own_sums: Vec<f64> = (0..found.passes)
        .map(|p| own.iter().map(|&ci| warm[ci][p]).sum())
        .collect();
    extra.insert(
        "own_matched_warm_median_ns".into(),
        Stats::from_ns(&mut own_sums).median_ns,
    );
    let first_sum: f64 = found.common.iter().map(|&ci| found.first[ei][ci]).sum();
    let mut sums: Vec<f64> = (0..found.passes)
        .map(|p| found.common.iter().map(|&ci| warm[ci][p]).sum())
        .collect();
    let mismatches: Vec<String> = (0..cases.len())
        .filter(|&ci| status[ci] == MISMATCHED || status[ci] == REJECTED)
        .map(|ci| {
            format!(
                "{}{}",
                fixtures[cases[ci].program].id,
                if status[ci] == MISMATCHED {
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
    let first = Outcome::Ok {
        stats: Stats::from_ns(&mut [first_sum]),
        extra: extra.clone(),
        note: note.clone(),
    };
    let warm = Outcome::Ok {
        stats: Stats::from_ns(&mut sums),
        extra,
        note,
    };
    (first, warm)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The corpus is vyre-libs' default-feature corpus of every earlier run (249 programs):
    /// each id of [`NN_ATTENTION_OPS`] is registered (the list is not stale) and left out.
    #[test]
    fn the_corpus_leaves_out_exactly_the_nn_attention_ops() {
        let registered: Vec<&str> = (vyre_foundation::operation::OperationRegistry::global())
            .iter()
            .filter(|e| e.build.is_some())
            .map(|e| e.id)
            .collect();
        for id in NN_ATTENTION_OPS {
            assert!(registered.contains(&id), "{id} is not registered");
        }
        let ids: Vec<&str> = corpus().iter().map(|f| f.id).collect();
        assert!(NN_ATTENTION_OPS.iter().all(|id| !ids.contains(id)));
        assert_eq!(ids.len(), 249, "the corpus changed size");
    }
}
