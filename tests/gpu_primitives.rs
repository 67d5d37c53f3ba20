//! GPU: every fixture case of the vyre-primitives and vyre-libs corpora (vyre's
//! `OperationRegistry`) runs byte-identical to vyre-reference, or fails where the
//! reference fails. Each case's outcome is printed. Programs using constructs not lowered
//! are rejected up front with a named construct (and counted).

mod common;

use std::collections::BTreeMap;
use vyre_driver::DispatchConfig;

#[test]
fn primitive_fixtures_match_the_reference() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let (mut cases, mut passed, mut both_fail) = (0usize, 0usize, 0usize);
    let mut rejected: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut failures = Vec::new();
    for entry in common::corpus::fixtures() {
        let Some(inputs) = entry.inputs else {
            continue;
        };
        let program = (entry.build)();
        let config = DispatchConfig::default();
        if let Err(error) = backend.emit(&program, &config) {
            let construct = error.to_string();
            assert!(
                construct.matches("Fix:").count() == 1,
                "{}: {construct}",
                entry.id
            );
            let key = match &error {
                vyre_cuda::CudaError::Codegen(c) => c.construct().unwrap_or("invalid").to_string(),
                other => other.to_string(),
            };
            println!("case {}: rejected ({key})", entry.id);
            rejected.entry(key).or_default().push(entry.id);
            continue;
        }
        for (index, case) in inputs().iter().enumerate() {
            cases += 1;
            let want = common::gpu::reference(&program, case);
            let got = backend.dispatch(&program, case, &config);
            let outcome = match (want, got) {
                (Ok(want), Ok(got)) if want == got => {
                    passed += 1;
                    "byte-identical".to_string()
                }
                (Ok(_), Ok(_)) => format!("{} case {index}: bytes differ", entry.id),
                // Both fail: the reference's run-time error is reproduced.
                (Err(_), Err(_)) => {
                    both_fail += 1;
                    "fails on both sides".to_string()
                }
                (w, g) => format!(
                    "{} case {index}: reference {:?} / gpu {:?}",
                    entry.id,
                    w.err(),
                    g.err().map(|e| e.to_string())
                ),
            };
            println!("case {} #{index}: {outcome}", entry.id);
            if outcome.contains(entry.id) {
                failures.push(outcome);
            }
        }
    }
    let rejected_programs: usize = rejected.values().map(Vec::len).sum();
    println!(
        "corpus fixtures: {cases} cases run, {passed} byte-identical, {both_fail} failing on both sides, {} mismatched; {rejected_programs} programs rejected",
        failures.len()
    );
    for (construct, ids) in &rejected {
        println!("  rejected for {construct}: {ids:?}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(cases > 100, "only {cases} fixture cases ran");
}
