//! Refusals of the emitter that vyre-reference shares: for each, a program that reaches the
//! refusal, which the emitter refuses naming the construct (with one `Fix:`) and which the
//! reference (or vyre's validator inside it) refuses too. `tests/data/unsupported_sites.txt`
//! points at these tests (`reference-rejects <test>`).

mod common;

use common::kernels::bin;
use vyre_cuda::codegen::{emit_ptx, PtxTarget};
use vyre_driver::BackendError;
use vyre_foundation::ir::{
    AtomicOp, BinOp, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program, SubgroupReduceOp,
    UnOp,
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

/// Zeroed inputs, one per buffer (the programs here declare no workgroup buffers).
fn inputs(program: &Program) -> Vec<Value> {
    (program.buffers().iter())
        .map(|_| Value::from(vec![0u8; 64]))
        .collect()
}

fn gid() -> Expr {
    Expr::InvocationId { axis: 0 }
}

/// The emitter refuses `program` naming `construct` (one `Fix:`), and the reference refuses
/// it for the same cause: its error contains `cause` (a validator rule such as `V091:`, or
/// the interpreter's own words).
fn both_refuse(program: &Program, construct: &str, cause: &str) {
    let error = emit_ptx(program, None, PtxTarget::sm90()).expect_err("the emitter must refuse");
    assert_eq!(error.construct(), Some(construct), "{error}");
    let text = BackendError::from(vyre_cuda::CudaError::from(error)).to_string();
    assert_eq!(text.matches("Fix:").count(), 1, "{text}");
    match vyre_reference::reference_eval(program, &inputs(program)) {
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

/// [`program`]'s buffers plus `extra` (binding 3).
fn program_with(body: Vec<Node>, extra: BufferDecl) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::F32).with_count(4),
            BufferDecl::read("b", 1, DataType::U32).with_count(4),
            BufferDecl::output("out", 2, DataType::U32).with_count(4),
            extra,
        ],
        [4, 1, 1],
        body,
    )
}

#[test]
fn casts_to_types_without_values_are_refused_by_both() {
    let program = program(vec![
        Node::let_bind("x", Expr::cast(DataType::Tensor, Expr::load("b", gid()))),
        Node::store("out", gid(), Expr::u32(0)),
    ]);
    both_refuse(&program, "Cast to tensor", "V012:");
}

#[test]
fn buffers_of_unsized_elements_are_refused_by_both() {
    let program = program_with(
        vec![
            Node::let_bind("x", Expr::load("t", gid())),
            Node::store("out", gid(), Expr::u32(0)),
        ],
        BufferDecl::read("t", 3, DataType::Tensor).with_count(4),
    );
    both_refuse(
        &program,
        "buffer of unsized element type tensor",
        "has unsized element type tensor",
    );
}

/// An element of no bits (a vector of no lanes): the reference counts a buffer by its
/// element's bit width and divides by zero, a panic rather than an error, so it never runs
/// such a program either.
#[test]
fn buffers_of_elements_without_bits_are_refused_by_both() {
    let no_lanes = DataType::Vec {
        element: Box::new(DataType::F32),
        count: 0,
    };
    let program = program_with(
        vec![Node::store("out", gid(), Expr::buf_len("t"))],
        BufferDecl::read("t", 3, no_lanes).with_count(4),
    );
    let error = emit_ptx(&program, None, PtxTarget::sm90()).expect_err("the emitter must refuse");
    assert_eq!(
        error.construct(),
        Some("buffer element type vec<f32;0>"),
        "{error}"
    );
    let text = BackendError::from(vyre_cuda::CudaError::from(error)).to_string();
    assert_eq!(text.matches("Fix:").count(), 1, "{text}");
    let inputs = inputs(&program);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        vyre_reference::reference_eval(&program, &inputs).is_ok()
    }));
    assert!(
        !matches!(ran, Ok(true)),
        "vyre-reference runs a buffer of elements without bits"
    );
}

/// `let x = atomicAdd(buffer[index], value); out[gid] = 0`.
fn atomic_add_discarded(buffer: &str, index: Expr, value: Expr) -> Vec<Node> {
    let add = Expr::Atomic {
        op: AtomicOp::Add,
        buffer: buffer.into(),
        index: Box::new(index),
        expected: None,
        value: Box::new(value),
        ordering: MemoryOrdering::Relaxed,
    };
    vec![
        Node::let_bind("x", add),
        Node::store("out", gid(), Expr::u32(0)),
    ]
}

#[test]
fn atomics_on_eight_byte_buffers_are_refused_by_both() {
    let program = program_with(
        atomic_add_discarded("w", gid(), Expr::cast(DataType::U64, Expr::u32(1))),
        BufferDecl::read_write("w", 3, DataType::U64).with_count(4),
    );
    both_refuse(&program, "atomic on a u64 buffer", "V014:");
}

/// `body` over a bytes buffer `src` (16 bytes), a u32 buffer `c` and the u32 output.
fn with_bytes(body: Vec<Node>) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("src", 0, DataType::Bytes)
                .with_count(16)
                .with_bytes_extraction(true),
            BufferDecl::read_write("c", 1, DataType::U32).with_count(4),
            BufferDecl::output("out", 2, DataType::U32).with_count(4),
        ],
        [4, 1, 1],
        body,
    )
}

/// A bytes load: the last four bytes of `src`, a run-time-sized value.
fn bytes_view() -> Expr {
    Expr::load("src", Expr::u32(12))
}

/// A bytes load (the rest of the buffer) where vyre's validator wants a u32: a loop bound
/// (V125) or an atomic's value (V057). (As a subgroup operand the reference runs it.)
#[test]
fn bytes_loads_as_loop_bounds_and_atomic_values_are_refused_by_both() {
    let looped = with_bytes(vec![
        Node::loop_for("i", Expr::u32(0), bytes_view(), vec![]),
        Node::store("out", gid(), Expr::u32(0)),
    ]);
    both_refuse(&looped, "run-time-sized bytes value", "V125:");
    let atomic = with_bytes(atomic_add_discarded("c", Expr::u32(0), bytes_view()));
    both_refuse(&atomic, "run-time-sized bytes value", "V057:");
}

/// Every other place a bytes load (or a variable bound to one) reaches where only a
/// fixed-size value lowers is refused by vyre's validator or the interpreter as well: an
/// `If` condition (V123), a cast to another type (V012), an integer unary operand (V101),
/// a compare-exchange's expected value (V058), an `Assign` changing the variable's type
/// either way (V045), a `Select` with one bytes arm (V029) and a trap address. (As an
/// operand of a binary operator, a Select condition, an index or a store's value the
/// emitter lowers it, failing at run time where the reference does.)
#[test]
fn bytes_loads_where_fixed_size_values_are_needed_are_refused_by_both() {
    let store = |value: Expr| Node::store("out", gid(), value);
    let compare_exchange = Expr::Atomic {
        op: AtomicOp::CompareExchange,
        buffer: "c".into(),
        index: Box::new(Expr::u32(0)),
        expected: Some(Box::new(bytes_view())),
        value: Box::new(Expr::u32(1)),
        ordering: MemoryOrdering::Relaxed,
    };
    let cases = [
        (
            vec![Node::if_then(bytes_view(), vec![store(Expr::u32(1))])],
            "V123:",
        ),
        (
            vec![store(Expr::cast(DataType::U32, bytes_view()))],
            "V012:",
        ),
        (
            vec![store(Expr::UnOp {
                op: UnOp::BitNot,
                operand: Box::new(bytes_view()),
            })],
            "V101:",
        ),
        (
            vec![Node::let_bind("x", compare_exchange), store(Expr::u32(0))],
            "V058:",
        ),
        (
            vec![
                Node::let_bind("v", bytes_view()),
                Node::assign("v", Expr::u32(3)),
                store(Expr::u32(0)),
            ],
            "V045:",
        ),
        (
            vec![
                Node::let_bind("v", Expr::u32(3)),
                Node::assign("v", bytes_view()),
                store(Expr::var("v")),
            ],
            "V045:",
        ),
        (
            vec![store(Expr::Select {
                cond: Box::new(Expr::bool(true)),
                true_val: Box::new(bytes_view()),
                false_val: Box::new(Expr::u32(1)),
            })],
            "V029:",
        ),
        (
            vec![
                Node::Trap {
                    address: Box::new(bytes_view()),
                    tag: "t".into(),
                },
                store(Expr::u32(0)),
            ],
            "address is not a u32",
        ),
    ];
    for (body, cause) in cases {
        both_refuse(&with_bytes(body), "run-time-sized bytes value", cause);
    }
}

/// The reference would address atomics on a 4-bit buffer four bytes apart (its atomic
/// stride is at least 4), but vyre's validator refuses them first.
#[test]
fn atomics_on_four_bit_buffers_are_refused_by_both() {
    let program = program_with(
        atomic_add_discarded("w", gid(), Expr::u32(1)),
        BufferDecl::read_write("w", 3, DataType::I4).with_count(8),
    );
    both_refuse(&program, "atomic on a i4 buffer", "V014:");
}

#[test]
fn half_casts_from_signed_integers_are_refused_by_both() {
    let signed = Expr::cast(DataType::I32, Expr::load("b", gid()));
    let program = program(vec![
        Node::let_bind("x", Expr::cast(DataType::F16, signed)),
        Node::store("out", gid(), Expr::u32(0)),
    ]);
    both_refuse(&program, "Cast from i32 to F16", "V012:");
}

#[test]
fn buffer_references_outside_calls_are_refused_by_both() {
    let program = program(vec![
        Node::let_bind("x", Expr::buffer_ref("b")),
        Node::store("out", gid(), Expr::u32(0)),
    ]);
    both_refuse(&program, "Expr::BufferRef(b)", "V051:");
}

#[test]
fn barriers_in_loops_with_per_lane_bounds_are_refused_by_both() {
    let program = program(vec![
        Node::let_bind("s", Expr::u32(0)),
        Node::loop_for(
            "i",
            Expr::u32(0),
            Expr::load("b", gid()),
            vec![
                Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                Node::assign("s", bin(BinOp::Add, Expr::var("s"), Expr::var("i"))),
            ],
        ),
        Node::store("out", gid(), Expr::var("s")),
    ]);
    both_refuse(
        &program,
        "Barrier in a loop with non-uniform bounds",
        "V010:",
    );
}

/// Runs `check` on a thread with room for the deep trees' recursive construction and drop.
fn on_big_stack(check: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(check)
        .expect("thread")
        .join()
        .expect("the check passed");
}

#[test]
fn statements_nested_deeper_than_the_validator_allows_are_refused_by_both() {
    on_big_stack(|| {
        let mut body = store_u32(Expr::u32(7));
        for _ in 0..vyre_cuda::codegen::MAX_STATEMENT_DEPTH + 1 {
            body = vec![Node::if_then(Expr::bool(true), body)];
        }
        both_refuse(&program(body), "deeply nested statements", "V018:");
    });
}

#[test]
fn expressions_nested_deeper_than_the_validator_allows_are_refused_by_both() {
    on_big_stack(|| {
        let mut value = gid();
        for _ in 0..vyre_cuda::codegen::MAX_EXPRESSION_DEPTH + 1 {
            value = bin(BinOp::Add, value, Expr::u32(1));
        }
        both_refuse(
            &program(store_u32(value)),
            "deeply nested expression",
            "V033:",
        );
    });
}

/// Links the crates that register composite ops (their bodies are what calls inline to).
use vyre_primitives as _;

#[test]
fn calls_that_cannot_be_inlined_are_refused_by_both() {
    let call = Expr::Call {
        op_id: "vyre-primitives::bitset::and".into(),
        args: vec![],
    };
    both_refuse(
        &program(store_u32(call)),
        "Expr::Call",
        "IR inlining argument count mismatch",
    );
}

#[test]
fn stores_of_bytes_loads_into_other_elements_are_refused_by_both() {
    let program = Program::wrapped(
        vec![
            BufferDecl::read("s", 0, DataType::Bytes)
                .with_count(16)
                .with_bytes_extraction(true),
            BufferDecl::output("out", 1, DataType::F32).with_count(4),
        ],
        [4, 1, 1],
        vec![Node::store("out", gid(), Expr::load("s", gid()))],
    );
    both_refuse(
        &program,
        "Store of a run-time-sized bytes value into a f32 buffer",
        "V121:",
    );
}

#[test]
fn calls_of_ops_without_an_ir_body_are_refused_by_both() {
    // A call left after inlining names an op without an IR body; in this crate graph
    // (vyre-libs and vyre-primitives linked) every registered op has one, and vyre's
    // validator refuses calls of unregistered ops. No CPU reference facet is registered
    // either, so the reference could not run a body-less registered op's call.
    let call = Expr::Call {
        op_id: "vyre_cuda_tests::not_registered".into(),
        args: vec![gid()],
    };
    both_refuse(
        &program(store_u32(call)),
        "Expr::Call(vyre_cuda_tests::not_registered)",
        "V016:",
    );
}

#[test]
fn casts_of_half_loads_to_bytes_are_refused_by_both() {
    let program = program_with(
        vec![
            Node::let_bind("x", Expr::cast(DataType::Bytes, Expr::load("h", gid()))),
            Node::store("out", gid(), Expr::u32(0)),
        ],
        BufferDecl::read("h", 3, DataType::F16).with_count(4),
    );
    both_refuse(&program, "Cast of an f16/bf16 load to bytes", "V023:");
}

/// An op whose body holds a collective: `AllReduce(out)`, then `out[0] = x[0] + 5`.
const ALL_REDUCE_OP: &str = "vyre_cuda_tests::all_reduce_then_add";

fn all_reduce_body() -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("x", 0, DataType::U32).with_count(1),
            BufferDecl::output("out", 1, DataType::U32).with_count(1),
        ],
        [1, 1, 1],
        vec![
            Node::AllReduce {
                buffer: "out".into(),
                op: vyre_foundation::ir::CollectiveOp::Sum,
                group: vyre_foundation::ir::CommGroup::WORLD,
            },
            Node::store(
                "out",
                Expr::u32(0),
                Expr::add(Expr::load("x", Expr::u32(0)), Expr::u32(5)),
            ),
        ],
    )
}

inventory::submit! {
    vyre_foundation::operation::OperationRegistration::new(
        ALL_REDUCE_OP,
        vyre_foundation::operation::OperationTier::External,
        Some(all_reduce_body),
        None,
        None,
    )
}

#[test]
fn collectives_from_inlined_calls_are_refused_by_both() {
    // The program's own collectives are lowered for one rank before calls are inlined (by
    // the reference and by the emitter's `prepare` alike); a call's body keeps its own.
    let call = Expr::call(ALL_REDUCE_OP, vec![Expr::load("b", gid())]);
    both_refuse(
        &program(store_u32(call)),
        "collective from an inlined call",
        "V046:",
    );
}
