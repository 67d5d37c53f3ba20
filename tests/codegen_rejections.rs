//! The emitter rejects what it cannot lower exactly, naming the construct and giving a
//! `Fix:` hint; it never panics and never emits a kernel with other semantics.

use vyre_cuda::codegen::{emit_ptx, CodegenError, PtxTarget};
use vyre_driver::BackendError;
use vyre_foundation::ir::{
    BufferAccess, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program, UnOp,
};

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
    emit_ptx(program, None, PtxTarget::sm90()).map(|k| k.ptx)
}

/// How many segments of `program`'s kernel run as a step machine (`lower::steps`).
fn step_machine_segments(program: &Program) -> u32 {
    emit_ptx(program, None, PtxTarget::sm90())
        .unwrap_or_else(|e| panic!("must lower: {e}"))
        .step_machine_segments
}

fn assert_rejected(program: &Program, construct: &str) {
    let error = emit(program).expect_err("must be rejected");
    assert_eq!(error.construct(), Some(construct), "{error}");
    let backend = BackendError::from(vyre_cuda::CudaError::from(error)).to_string();
    assert_eq!(backend.matches("Fix:").count(), 1, "{backend}");
}

#[test]
fn top_level_grid_sync_splits_the_kernel_into_ordered_entries() {
    let body = vec![
        Node::store("out", Expr::gid_x(), Expr::f32(1.0)),
        Node::barrier_with_ordering(MemoryOrdering::GridSync),
        Node::store("out", Expr::gid_x(), Expr::f32(2.0)),
    ];
    let kernel = emit_ptx(&program_with(body, [4, 1, 1]), None, PtxTarget::sm90()).unwrap();
    assert_eq!(kernel.abi.segments, 2);
    assert_eq!(kernel.abi.entry_name(1), "vyre_main_1");
}

#[test]
fn unresolvable_calls_are_rejected() {
    let call = vec![Node::store(
        "out",
        Expr::gid_x(),
        Expr::Call {
            op_id: "some.unknown.op".into(),
            args: vec![],
        },
    )];
    // The construct names the op: nothing registers an IR body for it.
    assert_rejected(
        &program_with(call, [4, 1, 1]),
        "Expr::Call(some.unknown.op)",
    );
}

#[test]
fn subgroup_ops_need_a_converged_subgroup() {
    let ballot = || Expr::SubgroupBallot {
        cond: Box::new(Expr::bool(true)),
    };
    let lane_is_3 = || Expr::BinOp {
        op: vyre_foundation::ir::BinOp::Eq,
        left: Box::new(Expr::gid_x()),
        right: Box::new(Expr::u32(3)),
    };
    // After an early Return the returned lanes stay in the warp for it.
    let after_return = vec![
        Node::if_then(lane_is_3(), vec![Node::Return]),
        Node::let_bind("b", ballot()),
    ];
    assert!(emit(&program_with(after_return, [32, 1, 1])).is_ok());
    // Inside a branch whose condition differs per lane, over a value that may change
    // (a buffer the program writes): no converged placement reads what the reference
    // reads, so the warp takes the reference's rounds (lane after lane: the operand loads
    // a buffer the lanes store to).
    let changing = vec![Node::if_then(
        lane_is_3(),
        vec![Node::store(
            "out",
            Expr::gid_x(),
            Expr::SubgroupReduce {
                op: vyre_foundation::ir::SubgroupReduceOp::Add,
                value: Box::new(Expr::load("out", Expr::gid_x())),
            },
        )],
    )];
    assert_eq!(
        step_machine_segments(&program_with(changing, [32, 1, 1])),
        1
    );
    // Over immutable values it is computed at the branch, for every lane.
    let hoisted = vec![Node::if_then(
        lane_is_3(),
        vec![Node::let_bind("b", ballot())],
    )];
    assert!(emit(&program_with(hoisted, [32, 1, 1])).is_ok());
    // In uniform control flow it lowers.
    let uniform = vec![Node::if_then(
        Expr::BinOp {
            op: vyre_foundation::ir::BinOp::Eq,
            left: Box::new(Expr::buf_len("a")),
            right: Box::new(Expr::u32(4)),
        },
        vec![Node::let_bind("b", ballot())],
    )];
    assert!(emit(&program_with(uniform, [32, 1, 1])).is_ok());
}

fn lt(left: Expr, right: u32) -> Expr {
    Expr::BinOp {
        op: vyre_foundation::ir::BinOp::Lt,
        left: Box::new(left),
        right: Box::new(Expr::u32(right)),
    }
}

fn reduce_add(value: Expr) -> Expr {
    Expr::SubgroupReduce {
        op: vyre_foundation::ir::SubgroupReduceOp::Add,
        value: Box::new(value),
    }
}

/// The reference steps lanes one statement at a time and reads each lane's variables at
/// the step it has reached: where lanes may be at different steps, or still on their
/// way to a Return, and the operand reads values that change, the segment runs as a
/// step machine; where every lane reads the same at any step, as converged code.
#[test]
fn subgroup_ops_over_lanes_at_different_steps_run_as_a_step_machine() {
    let lid = || Expr::LocalId { axis: 0 };
    let lets = |names: &[&str]| -> Vec<Node> {
        names
            .iter()
            .map(|name| Node::let_bind(*name, Expr::u32(1)))
            .collect()
    };
    // The branch takes lanes 0..4 two steps longer; `x` changes in it.
    let mut longer = lets(&["t", "w"]);
    longer.push(Node::assign("x", Expr::u32(7)));
    let skewed = vec![
        Node::let_bind("x", Expr::u32(0)),
        Node::if_then(lt(lid(), 4), longer.clone()),
        Node::let_bind("g", reduce_add(Expr::var("x"))),
    ];
    assert_eq!(step_machine_segments(&program_with(skewed, [32, 1, 1])), 1);
    // Equally long paths keep the lanes in step.
    let mut shorter = lets(&["t2", "w2"]);
    shorter.push(Node::assign("x", Expr::u32(9)));
    let even = vec![
        Node::let_bind("x", Expr::u32(0)),
        Node::if_then_else(lt(lid(), 4), longer.clone(), shorter),
        Node::let_bind("g", reduce_add(Expr::var("x"))),
    ];
    assert_eq!(step_machine_segments(&program_with(even, [32, 1, 1])), 0);
    // A time-invariant operand bound right after the branch: lagging lanes have not
    // bound it yet.
    let unbound = vec![
        Node::if_then(lt(lid(), 4), lets(&["t", "w"])),
        Node::let_bind("y", lid()),
        Node::let_bind("g", reduce_add(Expr::var("y"))),
    ];
    assert_eq!(step_machine_segments(&program_with(unbound, [32, 1, 1])), 1);
    // Ids need no binding: any step reads the same.
    let ids = vec![
        Node::if_then(lt(lid(), 4), lets(&["t", "w"])),
        Node::let_bind("g", reduce_add(lid())),
    ];
    assert_eq!(step_machine_segments(&program_with(ids, [32, 1, 1])), 0);
    // A lane reaching Return three steps after the others reach the operation.
    let mut long_return = lets(&["p", "q", "r"]);
    long_return.push(Node::Return);
    let late = vec![
        Node::let_bind("x", lid()),
        Node::assign("x", Expr::u32(5)),
        Node::if_then(lt(lid(), 4), long_return),
        Node::let_bind("g", reduce_add(Expr::var("x"))),
    ];
    assert_eq!(step_machine_segments(&program_with(late, [32, 1, 1])), 1);
    // After a data-dependent loop lanes are any number of steps apart: one may finish
    // (closing every scope) before another reads its variable.
    let looped = vec![
        Node::let_bind("z", lid()),
        Node::loop_for("i", Expr::u32(0), lid(), vec![]),
        Node::let_bind("g", reduce_add(Expr::var("z"))),
    ];
    assert_eq!(step_machine_segments(&program_with(looped, [32, 1, 1])), 1);
}

#[test]
fn subgroup_operands_over_written_memory_run_lane_after_lane() {
    let lid = || Expr::LocalId { axis: 0 };
    // Later lanes of the reference's round see earlier lanes' stores: a serial round.
    let same_statement = vec![Node::store(
        "out",
        lid(),
        reduce_add(Expr::load("out", lid())),
    )];
    assert_eq!(
        step_machine_segments(&program_with(same_statement, [32, 1, 1])),
        1
    );
    let add_one = || Expr::Atomic {
        op: vyre_foundation::ir::AtomicOp::Add,
        buffer: "c".into(),
        index: Box::new(Expr::u32(0)),
        expected: None,
        value: Box::new(Expr::u32(1)),
        ordering: MemoryOrdering::Relaxed,
    };
    let counter = |operand: Expr| {
        Program::wrapped(
            vec![BufferDecl::read_write("c", 0, DataType::U32).with_count(4)],
            [32, 1, 1],
            vec![Node::let_bind("g", reduce_add(operand))],
        )
    };
    // The reference runs an atomic in a subgroup operand once for every lane, on the
    // memory it shares: a step machine runs it lane by lane. Two on one buffer run in lane
    // turns (both of lane k before lane k + 1's), a subgroup operation nested in the
    // operand whole in every turn.
    assert_eq!(step_machine_segments(&counter(add_one())), 1);
    let plus = |left: Expr, right: Expr| Expr::BinOp {
        op: vyre_foundation::ir::BinOp::Add,
        left: Box::new(left),
        right: Box::new(right),
    };
    assert_eq!(
        step_machine_segments(&counter(plus(add_one(), add_one()))),
        1
    );
    assert_eq!(
        step_machine_segments(&counter(plus(
            plus(add_one(), add_one()),
            reduce_add(lid())
        ))),
        1
    );
    // The reference checks a branch holding a barrier against the whole workgroup's
    // choices: the step machine's warps then take their rounds together. (vyre's
    // validator takes `c` for uniform: the data-dependent branch assigns it a literal.)
    let barrier_in_branch = vec![
        Node::if_then(lt(lid(), 4), vec![Node::Return]),
        Node::let_bind("c", Expr::u32(0)),
        Node::if_then(lt(lid(), 9), vec![Node::assign("c", Expr::u32(1))]),
        Node::if_then(
            lt(Expr::var("c"), 1),
            vec![Node::barrier_with_ordering(MemoryOrdering::SeqCst)],
        ),
        Node::let_bind("g", reduce_add(lid())),
    ];
    assert_eq!(
        step_machine_segments(&program_with(barrier_in_branch, [32, 1, 1])),
        1
    );
}

#[test]
fn barrier_loops_need_uniform_bounds() {
    let body = vec![Node::loop_for(
        "k",
        Expr::u32(0),
        Expr::gid_x(),
        vec![Node::barrier_with_ordering(MemoryOrdering::SeqCst)],
    )];
    assert_rejected(
        &program_with(body, [32, 1, 1]),
        "Barrier in a loop with non-uniform bounds",
    );
}

#[test]
fn async_copies_snapshot_a_changing_source_locally_or_on_the_heap() {
    let wait = || Node::AsyncWait { tag: "t".into() };
    let load = |size: Expr| Node::AsyncLoad {
        source: "a".into(),
        destination: "out".into(),
        offset: Box::new(Expr::u32(0)),
        size: Box::new(size),
        tag: "t".into(),
    };
    // Unpaired starts and waits are run-time errors of the reference: lowered to faults.
    assert!(emit(&program_with(vec![wait()], [4, 1, 1])).is_ok());
    assert!(emit(&program_with(vec![load(Expr::u32(8))], [4, 1, 1])).is_ok());
    let disturbed = |size: Expr| {
        vec![
            load(size),
            Node::store("a", Expr::u32(0), Expr::f32(1.0)),
            wait(),
        ]
    };
    // A literal size bounds the snapshot taken at the start.
    let ptx = emit(&program_with(disturbed(Expr::u32(8)), [4, 1, 1])).unwrap();
    assert!(ptx.contains(".local .align 4 .b8 vyre_async0[8];"), "{ptx}");
    // Without one of at most 4096 bytes, a device-heap block of the run-time size.
    for size in [Expr::u32(4097), Expr::gid_x()] {
        let ptx = emit(&program_with(disturbed(size), [4, 1, 1])).unwrap();
        assert!(!ptx.contains(".local"), "{ptx}");
        assert!(ptx.contains(".extern .func free"), "{ptx}");
        assert_eq!(ptx.matches(", malloc, (").count(), 1, "{ptx}");
    }
    let ptx = emit(&program_with(vec![load(Expr::gid_x()), wait()], [4, 1, 1])).unwrap();
    assert!(!ptx.contains(".local") && !ptx.contains("malloc"), "{ptx}");
}

#[test]
fn impossible_workgroups_are_invalid() {
    for workgroup in [[0, 1, 1], [2048, 1, 1], [32, 32, 2]] {
        let error = emit(&program_with(vec![], workgroup)).expect_err("invalid workgroup");
        assert!(matches!(error, CodegenError::Invalid { .. }), "{error}");
        let text = vyre_cuda::CudaError::from(error).to_string();
        assert_eq!(text.matches("Fix:").count(), 1, "{text}");
    }
}

#[test]
fn elements_of_no_bits_are_rejected_up_front_and_wide_ones_lowered() {
    let lanes = |element: DataType, count: u8| DataType::Vec {
        element: Box::new(element),
        count,
    };
    let program = |element: DataType| {
        Program::wrapped(
            vec![BufferDecl::output("out", 0, element).with_count(4)],
            [4, 1, 1],
            vec![],
        )
    };
    let error = emit(&program(lanes(DataType::F32, 0))).expect_err("not lowered");
    assert!(
        error
            .construct()
            .is_some_and(|c| c.contains("element type")),
        "{error}"
    );
    // Over 255 bytes: loads are bytes views (`tests/common/wide_programs.rs`).
    for element in [
        DataType::Array { element_size: 256 },
        lanes(DataType::F32, 64),
        lanes(DataType::I64, 255),
    ] {
        assert!(emit(&program(element.clone())).is_ok(), "{element}");
    }
}

/// A read-only bytes input `a` (8 bytes) and the given output.
fn bytes_program(out: BufferDecl, body: Vec<Node>) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::Bytes)
                .with_count(8)
                .with_bytes_extraction(true),
            out,
        ],
        [4, 1, 1],
        body,
    )
}

#[test]
fn run_time_sized_bytes_values_lower_only_where_the_reference_computes_them() {
    let out = || BufferDecl::output("out", 1, DataType::U32).with_count(4);
    let bytes = || Expr::load("a", Expr::u32(1));
    // Stores, indices, Select conditions, operands (a run-time error) and assignments
    // lower; a cast of the rest of a buffer, or a select between a bytes view and a
    // fixed-size value (both rejected by vyre's validator), do not.
    let consumed = [
        Expr::Cast {
            target: DataType::U32,
            value: Box::new(bytes()),
        },
        Expr::select(Expr::bool(true), bytes(), Expr::u32(1)),
    ];
    for value in consumed {
        let program = bytes_program(out(), vec![Node::store("out", Expr::u32(0), value)]);
        assert_rejected(&program, "run-time-sized bytes value");
    }
    let into_f32 = bytes_program(
        BufferDecl::output("out", 1, DataType::F32).with_count(4),
        vec![Node::store("out", Expr::u32(0), bytes())],
    );
    assert_rejected(
        &into_f32,
        "Store of a run-time-sized bytes value into a f32 buffer",
    );
}

#[test]
fn bytes_loads_of_a_written_buffer_are_copied_where_a_store_could_change_them() {
    let program = |body: Vec<Node>| {
        Program::wrapped(
            vec![
                BufferDecl::storage("io", 0, BufferAccess::ReadWrite, DataType::Bytes)
                    .with_count(8)
                    .with_bytes_extraction(true),
                BufferDecl::output("out", 1, DataType::U32).with_count(4),
                BufferDecl::read("a", 2, DataType::Bytes)
                    .with_count(8)
                    .with_bytes_extraction(true),
            ],
            [4, 1, 1],
            body,
        )
    };
    let bind = |from: &str| Node::let_bind("rest", Expr::load(from, Expr::u32(3)));
    let store_io = || Node::store("io", Expr::u32(2), Expr::u32(7));
    let read_rest = || Node::store("out", Expr::u32(0), Expr::var("rest"));
    // `rest` is bound to a view of `from` (then maybe assigned one of `io`), and read
    // after a store into `io`.
    let read_after_store =
        |from: &str, binding: Node| program(vec![bind(from), binding, store_io(), read_rest()]);
    // Such a binding copies the bytes into a device-heap block (one `malloc`), which the
    // lane gives back where it leaves; read before the store, the view is read in place;
    // read after a barrier (other invocations' stores), it is copied.
    let copies = |program: &Program| {
        let ptx = emit(program).unwrap();
        ptx.matches(", malloc, (").count() == 1 && ptx.contains("call free, (")
    };
    assert!(copies(&read_after_store("io", Node::Block(vec![]))));
    let assigned = read_after_store("a", Node::assign("rest", Expr::load("io", Expr::u32(2))));
    assert!(copies(&assigned));
    let read_first = |between: Node| program(vec![bind("io"), between, read_rest(), store_io()]);
    assert!(!emit(&read_first(Node::Block(vec![])))
        .unwrap()
        .contains("malloc"));
    let barrier = Node::barrier_with_ordering(vyre_foundation::ir::MemoryOrdering::SeqCst);
    assert!(copies(&read_first(barrier)));
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
