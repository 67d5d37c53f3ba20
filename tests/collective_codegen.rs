//! vyre's collectives on one device, without a GPU: every `CommGroup::WORLD` collective
//! (AllReduce, AllGather, ReduceScatter, root-0 Broadcast) lowers as vyre-reference
//! lowers it and the PTX assembles with ptxas for sm_80 and sm_90; a group other than
//! WORLD or a nonzero root is rejected with one `Fix:` hint, as the reference rejects it.

mod common;

use common::collective_programs::{transport_cases, world_cases};
use common::ptxas_batch::{assert_all_assemble, Kernel};
use vyre_cuda::codegen::{emit_peer_synced, emit_ptx, reference_program, PeerSync, PtxTarget};
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
                let modules = [&kernel.checked_ptx, &kernel.cooperative_ptx];
                for ptx in std::iter::once(&kernel.ptx).chain(modules.into_iter().flatten()) {
                    common::ptxas::assemble_for(ptxas, ptx)
                        .unwrap_or_else(|e| panic!("{} ({target}): {e}", case.name));
                }
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

/// What a rank compiles assembles for sm_80 and sm_90: the fold kernel of every operator
/// and element type that lowers, for 2..8 ranks (the others are refused by the validator or
/// the emitter, as the reference refuses them), with their peer-synced forms (vector
/// entries that meet the other ranks), and the segments of a program cut at its
/// collectives.
#[test]
fn rank_kernels_assemble() {
    use vyre_cuda::codegen::{split_collectives, RankStep};
    use vyre_foundation::ir::{BufferDecl, CollectiveOp, CommGroup, DataType, Expr, Node, Program};
    let ptxas = common::ptxas::require_ptxas();
    // What lowers is assembled at the end, all kernels batched.
    let kernels = std::cell::RefCell::new(Vec::new());
    let assemble = |name: &str, program: &Program| -> bool {
        let Ok(prepared) = reference_program(program) else {
            return false;
        };
        if !vyre_foundation::validate::validate::validate(&prepared).is_empty() {
            return false;
        }
        for target in [PtxTarget::sm80(), PtxTarget::sm90()] {
            // A kernel the emitter refuses (an operator the reference defines no result for,
            // such as Add on u8) is refused at load, before any rank enqueues anything.
            let Ok(kernel) = emit_ptx(program, None, target) else {
                return false;
            };
            let modules = [Some(kernel.ptx), kernel.checked_ptx, kernel.cooperative_ptx];
            kernels
                .borrow_mut()
                .extend(modules.into_iter().flatten().map(|ptx| Kernel {
                    id: format!("{name} ({target})"),
                    ptx,
                }));
        }
        true
    };
    let ops = [
        CollectiveOp::Sum,
        CollectiveOp::Min,
        CollectiveOp::Max,
        CollectiveOp::BitAnd,
        CollectiveOp::BitOr,
        CollectiveOp::BitXor,
    ];
    let types = [
        DataType::U32,
        DataType::I32,
        DataType::F32,
        DataType::F16,
        DataType::BF16,
        DataType::F64,
        DataType::U8,
        DataType::U16,
    ];
    let mut assembled = 0;
    let (mut synced, mut refused) = (0, 0);
    for op in ops {
        for ty in &types {
            for world in 2..=8 {
                let program = vyre_cuda::collective_fold_program(op, ty.clone(), world)
                    .expect("every vyre collective operator folds");
                let name = format!("fold {op:?} {ty} W={world}");
                if !assemble(&name, &program) {
                    continue;
                }
                assembled += 1;
                // The form a rank runs after the all-to-all: its own block read in place.
                let binop = vyre_cuda::codegen::fold_operator(op).expect("an operator");
                for own in [0, world - 1] {
                    let around =
                        vyre_cuda::codegen::fold_program_around(binop, ty.clone(), world, own);
                    assert!(
                        assemble(&format!("{name} around rank {own}"), &around),
                        "{name}: the gathered form lowers, so must the form around rank {own}"
                    );
                    let around_in_place = vyre_cuda::codegen::fold_program_around_in_place(
                        binop,
                        ty.clone(),
                        world,
                        own,
                    );
                    assert!(
                        assemble(&format!("{name} in place at rank {own}"), &around_in_place),
                        "{name}: the gathered form lowers, so must the in-place form"
                    );
                    // The forms ranks linked by peer access run: in place (AllReduce)
                    // and into an output (ReduceScatter).
                    let in_place =
                        vyre_cuda::codegen::peer_fold_program(binop, ty.clone(), world, Some(own));
                    assert!(
                        assemble(
                            &format!("{name} peer fold in place at rank {own}"),
                            &in_place
                        ),
                        "{name}: the gathered form lowers, so must the in-place peer fold"
                    );
                    let local =
                        vyre_cuda::codegen::peer_fold_program_local(binop, ty.clone(), world, own);
                    assert!(
                        assemble(&format!("{name} local peer fold at rank {own}"), &local),
                        "{name}: the gathered form lowers, so must the local peer fold"
                    );
                }
                let scatter = vyre_cuda::codegen::peer_fold_program(binop, ty.clone(), world, None);
                assert!(
                    assemble(&format!("{name} peer fold"), &scatter),
                    "{name}: the gathered form lowers, so must the scattered peer fold"
                );
                // The peer-synced forms (their vector entries meet the other ranks), for
                // the last rank (the rank only changes which peers a block talks to).
                for rank in [world - 1] {
                    let in_place =
                        vyre_cuda::codegen::peer_fold_program(binop, ty.clone(), world, Some(rank));
                    for (form, program) in [("in place", &in_place), ("scattered", &scatter)] {
                        let name = format!("{name} peer-synced {form} fold at rank {rank}");
                        let prepared = reference_program(program).expect("the fold lowers");
                        let sync = PeerSync {
                            world: world as u32,
                            rank: rank as u32,
                        };
                        for target in [PtxTarget::sm80(), PtxTarget::sm90()] {
                            // A fold that can fault (f16/bf16 arithmetic records faults)
                            // is refused: every thread must reach the last meeting. The
                            // runtime then folds it between barriers.
                            let plain = emit_ptx(&prepared, None, target).expect("it lowers");
                            let kernel = emit_peer_synced(&prepared, target, sync);
                            if plain.reports_faults {
                                assert!(kernel.is_err(), "{name}: a faulting fold was synced");
                                refused += 1;
                                continue;
                            }
                            let kernel =
                                kernel.unwrap_or_else(|e| panic!("{name} ({target}): {e}"));
                            let vector = kernel.vector_ptx.expect("a peer-synced vector entry");
                            assert!(vector.contains("st.release.sys.global.u64"), "{name}");
                            kernels.borrow_mut().push(Kernel {
                                id: format!("{name} ({target})"),
                                ptx: vector,
                            });
                            synced += 1;
                        }
                    }
                }
            }
        }
    }
    // u32/i32/f32/f16/bf16/f64 fold Sum/Min/Max and u32/i32 the bitwise operators, for
    // each of the 7 world sizes.
    assert!(
        assembled >= (6 * 3 + 2 * 3) * 7,
        "only {assembled} fold kernels lowered"
    );
    // u32/i32/f32/f64 (the folds that cannot fault) for each operator they fold, 2 forms
    // each, both targets.
    assert_eq!(synced + refused, assembled * 2 * 2);
    assert!(
        synced >= (4 * 3 + 2 * 3) * 7 * 2 * 2,
        "only {synced} peer-synced folds"
    );
    let i = || Expr::InvocationId { axis: 0 };
    let program = Program::wrapped(
        vec![
            BufferDecl::read("x", 0, DataType::F32).with_count(64),
            BufferDecl::read_write("y", 1, DataType::F32).with_count(64),
            BufferDecl::read_write("g", 2, DataType::F32).with_count(256),
        ],
        [64, 1, 1],
        vec![
            Node::store("y", i(), Expr::load("x", i())),
            Node::AllReduce {
                buffer: "y".into(),
                op: CollectiveOp::Sum,
                group: CommGroup::WORLD,
            },
            Node::block(vec![Node::store("y", i(), Expr::load("y", i()))]),
            Node::AllGather {
                input: "y".into(),
                output: "g".into(),
                group: CommGroup::WORLD,
            },
            Node::store("g", i(), Expr::load("y", i())),
        ],
    );
    let steps = split_collectives(&program)
        .expect("a valid rank program")
        .expect("it holds collectives");
    let segments: Vec<&Program> = steps
        .iter()
        .filter_map(|step| match step {
            RankStep::Segment(segment) => Some(segment),
            RankStep::Collective(_) => None,
        })
        .collect();
    assert_eq!((steps.len(), segments.len()), (5, 3));
    for (index, segment) in segments.iter().enumerate() {
        assert!(
            assemble(&format!("segment {index}"), segment),
            "segment {index}"
        );
    }
    if let Some(ptxas) = &ptxas {
        assert_all_assemble(ptxas, &kernels.into_inner());
    }
}
