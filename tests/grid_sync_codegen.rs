//! The cooperative form of programs split at grid-wide barriers (no GPU): which programs
//! get it, what it is made of, and that ptxas assembles it for sm_80 and sm_90.

mod common;

use common::grid_programs;
use vyre_cuda::codegen::{emit_ptx, PtxTarget, COOPERATIVE_ENTRY};
use vyre_foundation::ir::{BufferDecl, DataType, Expr, MemoryOrdering, Node, Program};

#[test]
fn every_grid_case_assembles_with_a_cooperative_entry_where_exact() {
    let ptxas = common::ptxas::require_ptxas();
    for case in grid_programs::all() {
        for target in [PtxTarget::sm80(), PtxTarget::sm90()] {
            let kernel = emit_ptx(&case.program, None, target)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert!(kernel.abi.segments > 1, "{}", case.name);
            assert_eq!(kernel.abi.cooperative, case.cooperative, "{}", case.name);
            // The segment entries' module never holds the cooperative entry: the
            // dispatch route gives it a module of its own.
            assert!(!kernel.ptx.contains(COOPERATIVE_ENTRY), "{}", case.name);
            let segment_entries = kernel.ptx.matches(".visible .entry ").count();
            assert_eq!(segment_entries as u32, kernel.abi.segments, "{}", case.name);
            let Some(cooperative) = &kernel.cooperative_ptx else {
                assert!(!case.cooperative, "{}", case.name);
                continue;
            };
            assert!(case.cooperative, "{}", case.name);
            assert!(
                kernel.abi.fault_word,
                "{}: the grid barrier lives in the fault area",
                case.name
            );
            let entry = format!(".visible .entry {COOPERATIVE_ENTRY}(");
            assert_eq!(cooperative.matches(".visible .entry ").count(), 1);
            assert_eq!(cooperative.matches(&entry).count(), 1, "{}", case.name);
            // One grid barrier per segment boundary, each left uniformly on a fault.
            let barriers = cooperative
                .matches("atom.acq_rel.gpu.global.add.u32")
                .count();
            assert_eq!(barriers as u32, kernel.abi.segments - 1, "{}", case.name);
            if let Some(ptxas) = &ptxas {
                for module in [&kernel.ptx, cooperative] {
                    common::ptxas::assemble_for(ptxas, module)
                        .unwrap_or_else(|e| panic!("{} ({target}): {e}", case.name));
                }
            }
        }
    }
}

#[test]
fn cooperative_segments_never_exit_early() {
    // `Return` and the workgroup-wide fault exits must branch to the segment end: a thread
    // that exits never reaches the next grid barrier, and every other block would wait.
    let case = grid_programs::return_inside_segment();
    let kernel = emit_ptx(&case.program, None, PtxTarget::sm90()).unwrap();
    let coop = kernel
        .cooperative_ptx
        .as_deref()
        .expect("a cooperative entry");
    let coop = &coop[coop.find(COOPERATIVE_ENTRY).unwrap()..];
    assert!(!coop.contains("\texit;"), "{coop}");
    assert!(coop.contains("bra vyre_segment_end_0;"));
    assert!(coop.contains("bra vyre_segment_end_1;"));
}

fn return_beside_barrier() -> Program {
    Program::wrapped(
        vec![BufferDecl::output("out", 0, DataType::U32).with_count(64)],
        [64, 1, 1],
        vec![
            Node::if_then(
                Expr::eq(Expr::InvocationId { axis: 0 }, Expr::u32(3)),
                vec![Node::Return],
            ),
            Node::barrier(),
            Node::store("out", Expr::InvocationId { axis: 0 }, Expr::u32(1)),
            Node::barrier_with_ordering(MemoryOrdering::GridSync),
            Node::store("out", Expr::InvocationId { axis: 0 }, Expr::u32(2)),
        ],
    )
}

#[test]
fn return_beside_a_workgroup_barrier_keeps_only_the_split_form() {
    // Returned lanes leave a workgroup barrier's count only by exiting, which the
    // cooperative entry cannot do; such programs launch split.
    let kernel = emit_ptx(&return_beside_barrier(), None, PtxTarget::sm90()).unwrap();
    assert_eq!(kernel.abi.segments, 2);
    assert!(!kernel.abi.cooperative);
    assert!(!kernel.ptx.contains(COOPERATIVE_ENTRY));
    assert!(kernel.cooperative_ptx.is_none());
}

#[test]
fn programs_without_grid_barriers_have_no_cooperative_entry() {
    let program = Program::wrapped(
        vec![BufferDecl::output("out", 0, DataType::U32).with_count(64)],
        [64, 1, 1],
        vec![Node::store(
            "out",
            Expr::InvocationId { axis: 0 },
            Expr::u32(1),
        )],
    );
    let kernel = emit_ptx(&program, None, PtxTarget::sm90()).unwrap();
    assert_eq!(kernel.abi.segments, 1);
    assert!(!kernel.abi.cooperative);
    assert!(!kernel.abi.fault_word);
}

#[test]
fn the_reference_runs_every_grid_case_and_fails_only_the_fault() {
    for case in grid_programs::all() {
        let result = common::gpu::reference(&case.program, &case.inputs);
        assert_eq!(
            result.is_err(),
            case.expect_error,
            "{}: {result:?}",
            case.name
        );
    }
}
