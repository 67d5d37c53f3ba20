//! The emitter rejects what it cannot lower exactly, naming the construct and giving a
//! `Fix:` hint; it never panics and never emits a kernel with other semantics.

use vyre_cuda::codegen::{emit_ptx, CodegenError, PtxTarget};
use vyre_driver::{BackendError, DispatchConfig};
use vyre_foundation::ir::{BufferDecl, DataType, Expr, MemoryOrdering, Node, Program, UnOp};

fn program_with(body: Vec<Node>, workgroup: [u32; 3]) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::F32).with_count(4),
            BufferDecl::output("out", 1, DataType::F32).with_count(4),
        ],
        workgroup,
        body,
    )
}

fn emit(program: &Program) -> Result<String, CodegenError> {
    emit_ptx(program, &DispatchConfig::default(), PtxTarget::sm90()).map(|k| k.ptx)
}

fn assert_rejected(program: &Program, construct: &str) {
    let error = emit(program).expect_err("must be rejected");
    assert_eq!(error.construct(), Some(construct), "{error}");
    let backend: BackendError = error.into();
    assert!(backend.to_string().contains("Fix:"), "{backend}");
}

#[test]
fn grid_sync_through_the_direct_api_is_rejected() {
    let body = vec![Node::barrier_with_ordering(MemoryOrdering::GridSync)];
    assert_rejected(&program_with(body, [4, 1, 1]), "Barrier(GridSync)");
}

#[test]
fn calls_and_subgroup_ops_are_rejected() {
    let call = vec![Node::store(
        "out",
        Expr::gid_x(),
        Expr::Call {
            op_id: "some.op".into(),
            args: vec![],
        },
    )];
    assert_rejected(&program_with(call, [4, 1, 1]), "Expr::Call(some.op)");
    let ballot = vec![Node::let_bind(
        "b",
        Expr::SubgroupBallot {
            cond: Box::new(Expr::bool(true)),
        },
    )];
    assert_rejected(&program_with(ballot, [32, 1, 1]), "subgroup operations");
}

#[test]
fn trap_and_async_nodes_are_rejected() {
    let trap = vec![Node::Trap {
        address: Box::new(Expr::u32(0)),
        tag: "t".into(),
    }];
    assert_rejected(&program_with(trap, [4, 1, 1]), "Node::Trap");
}

#[test]
fn impossible_workgroups_are_invalid() {
    for workgroup in [[0, 1, 1], [2048, 1, 1], [32, 32, 2]] {
        let error = emit(&program_with(vec![], workgroup)).expect_err("invalid workgroup");
        assert!(matches!(error, CodegenError::Invalid { .. }), "{error}");
        assert!(error.to_string().contains("Fix:"));
    }
}

#[test]
fn unsupported_element_types_are_rejected_up_front() {
    let program = Program::wrapped(
        vec![BufferDecl::output("out", 0, DataType::F16).with_count(4)],
        [4, 1, 1],
        vec![],
    );
    let error = emit(&program).expect_err("f16 buffers are not lowered yet");
    assert!(
        error
            .construct()
            .is_some_and(|c| c.contains("f16") || c.contains("F16")),
        "{error}"
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let mut value = Expr::load("a", Expr::gid_x());
    for _ in 0..5000 {
        value = Expr::UnOp {
            op: UnOp::Negate,
            operand: Box::new(value),
        };
    }
    let body = vec![Node::store("out", Expr::gid_x(), value)];
    let program = program_with(body, [4, 1, 1]);
    let result = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || emit(&program).map(|_| ()))
        .unwrap()
        .join()
        .unwrap();
    assert!(result.is_err());
}
