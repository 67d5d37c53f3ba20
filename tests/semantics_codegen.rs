//! CPU gate for the hand-written semantic corpus: every case lowers (none is rejected)
//! and assembles with ptxas for sm_80 and sm_90.

mod common;

use vyre_cuda::codegen::{emit_ptx, PtxIsa, PtxTarget};

#[test]
fn every_semantic_case_lowers_and_assembles() {
    let ptxas = common::ptxas::require_ptxas();
    let targets = [
        PtxTarget::sm80(),
        PtxTarget::sm90(),
        PtxTarget::new(90, PtxIsa::new(9, 0)).expect("sm_90 at PTX 9.0"),
    ];
    let cases = common::programs::all_cases();
    assert!(
        cases.len() > 100,
        "the semantic corpus shrank to {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        for target in targets {
            match emit_ptx(&case.program, case.config.workgroup_override, target) {
                Ok(kernel) => {
                    if let Some(ptxas) = &ptxas {
                        if let Err(error) = common::ptxas::assemble_for(ptxas, &kernel.ptx) {
                            failures.push(format!("{} for {target}: {error}", case.name));
                        }
                    }
                }
                Err(error) => failures.push(format!("{} rejected: {error}", case.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn emitted_kernels_are_deterministic() {
    for case in common::programs::all_cases().iter().take(20) {
        let a = emit_ptx(
            &case.program,
            case.config.workgroup_override,
            PtxTarget::sm90(),
        )
        .unwrap();
        let b = emit_ptx(
            &case.program,
            case.config.workgroup_override,
            PtxTarget::sm90(),
        )
        .unwrap();
        assert_eq!(a, b, "{}", case.name);
    }
}

#[test]
fn every_semantic_case_is_valid_for_the_reference() {
    // A case the reference rejects would make the GPU comparison vacuous.
    let mut invalid = Vec::new();
    for case in common::programs::all_cases() {
        let result = common::gpu::reference(&case.program, &case.inputs);
        if result.is_err() != case.expect_error {
            invalid.push(format!("{}: {:?}", case.name, result.err()));
        }
    }
    assert!(invalid.is_empty(), "{}", invalid.join("\n"));
}
