//! vyre's collectives on one device, without a GPU: every `CommGroup::WORLD` collective
//! (AllReduce, AllGather, ReduceScatter, root-0 Broadcast) lowers as vyre-reference
//! lowers it and the PTX assembles with ptxas for sm_80 and sm_90; a group other than
//! WORLD or a nonzero root is rejected with one `Fix:` hint, as the reference rejects it.

mod common;

use common::collective_programs::{transport_cases, world_cases};
use vyre_cuda::codegen::{emit_ptx, reference_program, PtxTarget};
use vyre_driver::BackendError;
use vyre_foundation::ir::Node;

fn has_collective(nodes: &[Node]) -> bool {
    nodes.iter().any(|node| match node {
        Node::AllReduce { .. }
        | Node::AllGather { .. }
        | Node::ReduceScatter { .. }
        | Node::Broadcast { .. } => true,
        Node::If {
            then, otherwise, ..
        } => has_collective(then) || has_collective(otherwise),
        Node::Loop { body, .. } | Node::Block(body) => has_collective(body),
        Node::Region { body, .. } => has_collective(body),
        _ => false,
    })
}

#[test]
fn world_collectives_lower_for_one_device_and_assemble() {
    let ptxas = common::ptxas::require_ptxas();
    let cases = world_cases();
    for case in &cases {
        assert!(has_collective(case.program.entry()), "{}", case.name);
        // The GPU test compares with these outputs: the reference must run every case.
        let outputs = common::gpu::reference(&case.program, &case.inputs)
            .unwrap_or_else(|e| panic!("{}: the reference fails: {e}", case.name));
        assert!(!outputs.is_empty(), "{}", case.name);
        let prepared = reference_program(&case.program)
            .unwrap_or_else(|e| panic!("{}: the reference runs it, so must we: {e}", case.name));
        assert!(
            !has_collective(prepared.entry()),
            "{}: lowered for one device",
            case.name
        );
        for target in [PtxTarget::sm80(), PtxTarget::sm90()] {
            let kernel = emit_ptx(&case.program, None, target)
                .unwrap_or_else(|e| panic!("{} ({target}): {e}", case.name));
            if let Some(ptxas) = &ptxas {
                common::ptxas::assemble_for(ptxas, &kernel.ptx)
                    .unwrap_or_else(|e| panic!("{} ({target}): {e}", case.name));
            }
        }
    }
    let kinds = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"];
    for kind in kinds {
        assert!(
            cases.iter().any(|case| case.name.starts_with(kind)),
            "no {kind} case"
        );
    }
}

#[test]
fn collectives_that_need_a_transport_are_rejected_with_one_fix() {
    for case in transport_cases() {
        let error = emit_ptx(&case.program, None, PtxTarget::sm90())
            .expect_err("the reference rejects it, so must we");
        let text = vyre_cuda::CudaError::from(error.clone()).to_string();
        assert_eq!(text.matches("Fix:").count(), 1, "{}: {text}", case.name);
        assert!(text.contains("CommGroup::WORLD"), "{}: {text}", case.name);
        let reference = common::gpu::reference(&case.program, &case.inputs)
            .expect_err("the reference rejects it");
        let vyre_reason = if case.name.contains("root1") {
            "root 0"
        } else {
            "only accepts CommGroup::WORLD"
        };
        assert!(
            reference.contains(vyre_reason),
            "{}: {reference}",
            case.name
        );
        assert!(text.contains(vyre_reason), "{}: {text}", case.name);
        let backend = BackendError::from(vyre_cuda::CudaError::from(error)).to_string();
        assert_eq!(
            backend.matches("Fix:").count(),
            1,
            "{}: {backend}",
            case.name
        );
    }
}
