//! Refusals of the emitter that vyre-reference shares: for each, a program that reaches the
//! refusal, which the emitter refuses naming the construct (with one `Fix:`) and which the
//! reference (or vyre's validator inside it) refuses too. `tests/data/unsupported_sites.txt`
//! points at these tests (`reference-rejects <test>`).

use vyre_cuda::codegen::{emit_ptx, PtxTarget};
use vyre_driver::BackendError;
use vyre_foundation::ir::{
    BinOp, BufferDecl, DataType, Expr, Node, Program, SubgroupReduceOp, UnOp,
};
use vyre_reference::value::Value;

fn program(body: Vec<Node>) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::F32).with_count(4),
            BufferDecl::read("b", 1, DataType::U32).with_count(4),
            BufferDecl::output("out", 2, DataType::U32).with_count(4),
        ],
        [4, 1, 1],
        body,
    )
}

fn inputs() -> Vec<Value> {
    vec![
        Value::from(vec![0u8; 16]),
        Value::from(vec![0u8; 16]),
        Value::from(vec![0u8; 16]),
    ]
}

fn gid() -> Expr {
    Expr::InvocationId { axis: 0 }
}

fn bin(op: BinOp, left: Expr, right: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(left),
        right: Box::new(right),
    }
}

/// The emitter refuses `program` naming `construct` (one `Fix:`), and the reference refuses
/// it for the same cause: its error contains `cause` (a validator rule such as `V091:`, or
/// the interpreter's own words).
fn both_refuse(program: &Program, construct: &str, cause: &str) {
    let error = emit_ptx(program, None, PtxTarget::sm90()).expect_err("the emitter must refuse");
    assert_eq!(error.construct(), Some(construct), "{error}");
    let text = BackendError::from(vyre_cuda::CudaError::from(error)).to_string();
    assert_eq!(text.matches("Fix:").count(), 1, "{text}");
    match vyre_reference::reference_eval(program, &inputs()) {
        Ok(_) => panic!("vyre-reference runs the program the emitter refuses as `{construct}`"),
        Err(error) => assert!(
            error.to_string().contains(cause),
            "the reference refuses `{construct}` for another reason: {error}"
        ),
    }
}

fn store_u32(value: Expr) -> Vec<Node> {
    vec![Node::store("out", gid(), value)]
}

#[test]
fn bitwise_operators_on_floats_are_refused_by_both() {
    let value = bin(BinOp::BitAnd, Expr::load("a", gid()), Expr::f32(1.0));
    let program = program(store_u32(Expr::cast(DataType::U32, value)));
    both_refuse(&program, "BinOp::BitAnd on f32", "V091:");
}

#[test]
fn integer_unary_operators_on_floats_are_refused_by_both() {
    let value = Expr::UnOp {
        op: UnOp::Popcount,
        operand: Box::new(Expr::load("a", gid())),
    };
    let program = program(store_u32(Expr::cast(DataType::U32, value)));
    both_refuse(&program, "UnOp::Popcount on f32", "V101:");
}

#[test]
fn binary_operators_on_mismatched_operands_are_refused_by_both() {
    let value = bin(BinOp::Add, Expr::load("b", gid()), Expr::load("a", gid()));
    let program = program(store_u32(Expr::cast(DataType::U32, value)));
    both_refuse(&program, "BinOp::Add on mismatched operands", "V088:");
}

#[test]
fn selects_with_arms_of_different_types_are_refused_by_both() {
    let value = Expr::select(Expr::bool(true), Expr::load("b", gid()), Expr::f32(1.0));
    let program = program(store_u32(Expr::cast(DataType::U32, value)));
    both_refuse(
        &program,
        "Expr::Select with arms of different types",
        "V029",
    );
}

#[test]
fn fma_on_integers_is_refused_by_both() {
    let b = || Expr::load("b", gid());
    let program = program(store_u32(Expr::fma(b(), b(), b())));
    both_refuse(&program, "Expr::Fma on non-f32 operands", "V028:");
}

#[test]
fn assignments_changing_a_variables_type_are_refused_by_both() {
    let program = program(vec![
        Node::let_bind("x", Expr::load("b", gid())),
        Node::assign("x", Expr::f32(1.0)),
        Node::store("out", gid(), Expr::u32(0)),
    ]);
    both_refuse(&program, "Node::Assign changing a variable's type", "V045:");
}

#[test]
fn bitwise_subgroup_reductions_of_floats_are_refused_by_both() {
    let value = Expr::SubgroupReduce {
        op: SubgroupReduceOp::And,
        value: Box::new(Expr::load("a", gid())),
    };
    let program = program(store_u32(Expr::cast(DataType::U32, value)));
    both_refuse(&program, "SubgroupReduce::And of f32 lanes", "V047:");
}

#[test]
fn float_casts_the_reference_does_not_define_are_refused_by_both() {
    let value = Expr::cast(DataType::U64, Expr::load("a", gid()));
    let program = program(store_u32(Expr::cast(DataType::U32, value)));
    both_refuse(&program, "Cast from f32 to u64", "V012:");
}

#[test]
fn subgroup_operations_over_lanes_the_reference_does_not_combine_are_refused_by_both() {
    let value = Expr::SubgroupReduce {
        op: SubgroupReduceOp::Add,
        value: Box::new(Expr::cast(DataType::I32, Expr::load("b", gid()))),
    };
    let program = program(store_u32(Expr::cast(DataType::U32, value)));
    both_refuse(
        &program,
        "SubgroupReduce of i32 lanes",
        "subgroup reduce lanes have mixed or unsupported value types",
    );
}
