//! CPU gate for the hand-written semantic corpus: every case lowers (none is rejected)
//! and assembles with ptxas for sm_80 and sm_90.

mod common;

use common::ptxas_batch::{assemble_everywhere, Kernel};

use vyre_cuda::codegen::{emit_ptx, PtxIsa, PtxTarget};
use vyre_foundation::ir::{BufferAccess, DataType};

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
    let mut kernels = Vec::new();
    for case in &cases {
        for target in targets {
            match emit_ptx(&case.program, case.config.workgroup_override, target) {
                Ok(kernel) => {
                    let modules = [Some(kernel.ptx), kernel.checked_ptx, kernel.cooperative_ptx];
                    kernels.extend(modules.into_iter().flatten().map(|ptx| Kernel {
                        id: format!("{} for {target}", case.name),
                        ptx,
                    }))
                }
                Err(error) => failures.push(format!("{} rejected: {error}", case.name)),
            }
        }
    }
    if let Some(ptxas) = &ptxas {
        let refused = assemble_everywhere(ptxas, &kernels);
        failures.extend(refused.iter().map(|r| r.to_string()));
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

/// F16/BF16 below sm_80: bf16 rounds with integer instructions (there is no
/// `cvt.rn.bf16.f32` before sm_80), assembled for sm_70 and sm_75 with the CUDA 12.9
/// `ptxas` (CUDA 13 no longer targets sm_70); sm_80 and newer round with the `cvt`.
#[test]
fn half_cases_round_bf16_with_integers_below_sm80_and_assemble() {
    let cu12 = common::ptxas::require_ptxas().and_then(|_| common::ptxas::cu12_ptxas());
    let old = [70, 75].map(|sm| PtxTarget::new(sm, PtxIsa::new(7, 8)).expect("target"));
    let mut failures = Vec::new();
    for case in common::half_programs::half_cases() {
        let text = format!("{:?}", case.program);
        let writes_bf16 = case
            .program
            .buffers()
            .iter()
            .any(|b| b.element() == DataType::BF16 && b.access() != BufferAccess::ReadOnly);
        let rounds_bf16 = writes_bf16 || text.contains("target: BF16");
        for target in old
            .into_iter()
            .chain([PtxTarget::sm80(), PtxTarget::sm90()])
        {
            let ptx = match emit_ptx(&case.program, case.config.workgroup_override, target) {
                Ok(kernel) => kernel.ptx,
                Err(error) => {
                    failures.push(format!("{} rejected for {target}: {error}", case.name));
                    continue;
                }
            };
            let (cvt, integer) = (ptx.contains("cvt.rn.bf16.f32"), ptx.contains("bfe.u32"));
            let expected = if target.sm() >= 80 {
                (rounds_bf16, false)
            } else {
                (false, rounds_bf16)
            };
            if (cvt, integer) != expected {
                failures.push(format!(
                    "{} for {target}: (cvt.rn.bf16.f32, bfe.u32) = {:?}, want {expected:?}",
                    case.name,
                    (cvt, integer)
                ));
            }
            if let (Some(cu12), true) = (&cu12, target.sm() < 80) {
                if let Err(error) = common::ptxas::assemble_for(cu12, &ptx) {
                    failures.push(format!("{} for {target}: {error}", case.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The snapshot cases are only meaningful if the reference really copies the source as it
/// was at the start: their source bytes are multiples of 0x11, the bytes stored to it
/// before the wait are not.
#[test]
fn async_snapshot_cases_copy_the_source_as_it_was_at_the_start() {
    for case in common::programs::async_snapshot_cases() {
        let outputs = common::gpu::reference(&case.program, &case.inputs).expect(&case.name);
        let copied = outputs.last().expect("the copy's destination is returned");
        assert!(
            copied.iter().any(|&b| b != 0) && copied.iter().all(|&b| b % 0x11 == 0),
            "{}: {copied:02x?}",
            case.name
        );
    }
}

/// The dot-product loop of vyre-libs' matmul runs in two copies (`analysis::loop_bounds`):
/// one with the per-load out-of-bounds select (two loads), one without (two plain loads).
/// The GPU suite runs both copies (`loop_programs`) against the reference.
#[test]
fn a_dot_product_loop_gets_a_copy_without_per_load_checks() {
    let cases = common::loop_programs::hoisted_bounds_cases();
    let kernel = emit_ptx(&cases[0].program, None, PtxTarget::sm90()).unwrap();
    let count = |prefix: &str| {
        kernel
            .ptx
            .lines()
            .filter(|line| line.trim_start().starts_with(prefix))
            .count()
    };
    assert_eq!(count("ld.global.u32"), 4, "{}", kernel.ptx);
    assert_eq!(count("selp.b64"), 2, "{}", kernel.ptx);
}

/// The speculated branches' loops hold one branch, their exit test: the body's `If` is
/// straight-line code (`lower::speculate`), which ptxas unrolls, issuing the loads of
/// several iterations before their uses. (The cases' results are checked on the GPU.)
#[test]
fn speculated_branches_leave_their_loops_without_a_branch_in_the_body() {
    for case in common::speculation_programs::speculated_branch_cases() {
        let kernel = emit_ptx(&case.program, None, PtxTarget::sm90()).unwrap();
        let lines: Vec<&str> = kernel.ptx.lines().map(str::trim).collect();
        let loops: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter_map(|(at, line)| {
                let label = line.strip_suffix(':')?;
                let back = format!("bra {label};");
                let end = lines[at..].iter().position(|l| *l == back)?;
                Some(
                    lines[at + 1..at + end]
                        .iter()
                        .filter(|l| l.contains("bra "))
                        .count(),
                )
            })
            .collect();
        assert_eq!(loops, vec![1], "{}: {}", case.name, kernel.ptx);
    }
}
