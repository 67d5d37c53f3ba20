//! The elementwise (vector) entry, without a GPU: which programs get one, and that it
//! assembles with ptxas for every gated target.

mod common;

use common::ptxas;
use vyre_cuda::codegen::{emit_ptx, PtxTarget, VECTOR_ENTRY, VECTOR_LANES};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program};

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

/// `out[i] = a[i] + (b[i] + 3)` under `i < n`: the benchmark's vadd.
fn vadd(n: u32) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read("b", 1, DataType::U32).with_count(n),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [256, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, gid(), Expr::u32(n)),
            vec![Node::store(
                "out",
                gid(),
                bin(
                    BinOp::Add,
                    Expr::load("a", gid()),
                    bin(BinOp::Add, Expr::load("b", gid()), Expr::u32(3)),
                ),
            )],
        )],
    )
}

/// Every element size: a copy of `src[i]` (type `element`) into `dst[i]`, plus `x[i] += i`
/// in place on a read-write u32 buffer and an f32 computed from the index.
fn mixed(element: DataType) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("src", 0, element.clone()).with_count(37),
            BufferDecl::output("dst", 1, element).with_count(41),
            BufferDecl::read_write("x", 2, DataType::U32).with_count(29),
            BufferDecl::output("f", 3, DataType::F32).with_count(33),
        ],
        [64, 1, 1],
        vec![
            Node::let_bind("i", gid()),
            Node::store("dst", Expr::var("i"), Expr::load("src", Expr::var("i"))),
            Node::store(
                "x",
                Expr::var("i"),
                bin(BinOp::Add, Expr::load("x", Expr::var("i")), Expr::var("i")),
            ),
            Node::store(
                "x",
                Expr::var("i"),
                bin(BinOp::Mul, Expr::load("x", Expr::var("i")), Expr::u32(3)),
            ),
            Node::if_then(
                bin(
                    BinOp::Eq,
                    bin(BinOp::Mod, gid(), Expr::u32(5)),
                    Expr::u32(0),
                ),
                vec![Node::Return],
            ),
            Node::store(
                "f",
                gid(),
                bin(BinOp::Div, Expr::cast(DataType::F32, gid()), Expr::f32(3.0)),
            ),
        ],
    )
}

fn assembles(program: &Program) {
    let Some(ptxas) = ptxas::require_ptxas() else {
        return;
    };
    for target in [PtxTarget::sm80(), PtxTarget::sm90()] {
        let sm = target.sm();
        let kernel = emit_ptx(program, None, target).expect("emits");
        assert_eq!(kernel.abi.vector_lanes, VECTOR_LANES);
        // The runtime loads the two modules separately (the vector one lazily).
        let (scalar, vector) = (
            &kernel.ptx,
            kernel.vector_ptx.as_ref().expect("a vector entry"),
        );
        assert!(scalar.contains(".entry vyre_main(") && !scalar.contains(VECTOR_ENTRY));
        assert!(vector.contains(VECTOR_ENTRY) && !vector.contains(".entry vyre_main("));
        for (half, ptx) in [("scalar", scalar), ("vector", vector)] {
            ptxas::assemble_for(&ptxas, ptx)
                .unwrap_or_else(|e| panic!("sm_{sm} {half} module: {e}"));
        }
    }
}

#[test]
fn vadd_gets_a_vector_entry_that_assembles() {
    assembles(&vadd(1000));
}

#[test]
fn every_element_size_gets_a_vector_entry_that_assembles() {
    for element in [
        DataType::U8,
        DataType::U16,
        DataType::U32,
        DataType::F32,
        DataType::U64,
        DataType::F64,
        DataType::Vec4U32,
    ] {
        assembles(&mixed(element));
    }
}

#[test]
fn non_elementwise_programs_get_no_vector_entry() {
    let shifted = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(8),
            BufferDecl::output("out", 1, DataType::U32).with_count(8),
        ],
        [8, 1, 1],
        vec![Node::store(
            "out",
            gid(),
            Expr::load("a", bin(BinOp::Add, gid(), Expr::u32(1))),
        )],
    );
    let kernel = emit_ptx(&shifted, None, PtxTarget::sm90()).unwrap();
    assert_eq!(kernel.abi.vector_lanes, 0);
    assert!(!kernel.ptx.contains(VECTOR_ENTRY));
    assert!(kernel.vector_ptx.is_none());
    // A 2-D workgroup gives several invocations the same x index.
    let mut config = DispatchConfig::default();
    config.workgroup_override = Some([16, 4, 1]);
    let kernel = emit_ptx(&vadd(64), config.workgroup_override, PtxTarget::sm90()).unwrap();
    assert_eq!(kernel.abi.vector_lanes, 0);
}

/// A sum (literal index), a histogram (computed index) and an elementwise store: the
/// accumulated buffers are flagged in the ABI and the vector entry assembles.
#[test]
fn reductions_get_a_vector_entry_with_accumulated_bindings() {
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(1000),
            BufferDecl::read_write("sum", 1, DataType::U32).with_count(1),
            BufferDecl::output("hist", 2, DataType::U32).with_count(64),
            BufferDecl::read_write("out", 3, DataType::U32).with_count(1000),
        ],
        [256, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, gid(), Expr::u32(1000)),
            vec![
                Node::let_bind(
                    "s",
                    Expr::atomic_add("sum", Expr::u32(0), Expr::load("a", gid())),
                ),
                Node::let_bind(
                    "h",
                    Expr::atomic_or(
                        "hist",
                        bin(BinOp::BitAnd, Expr::load("a", gid()), Expr::u32(63)),
                        gid(),
                    ),
                ),
                Node::store("out", gid(), Expr::load("a", gid())),
            ],
        )],
    );
    let kernel = emit_ptx(&program, None, PtxTarget::sm90()).unwrap();
    let accumulated: Vec<bool> = kernel.abi.bindings.iter().map(|b| b.accumulated).collect();
    assert_eq!(accumulated, [false, true, true, false]);
    assembles(&program);
    // Reading an atomic's old value keeps the program on the scalar entry only.
    let observed = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(8),
            BufferDecl::read_write("sum", 1, DataType::U32).with_count(1),
            BufferDecl::output("out", 2, DataType::U32).with_count(8),
        ],
        [8, 1, 1],
        vec![
            Node::let_bind(
                "s",
                Expr::atomic_add("sum", Expr::u32(0), Expr::load("a", gid())),
            ),
            Node::store("out", gid(), Expr::var("s")),
        ],
    );
    let kernel = emit_ptx(&observed, None, PtxTarget::sm90()).unwrap();
    assert_eq!(kernel.abi.vector_lanes, 0);
    assert!(kernel.abi.bindings.iter().all(|b| !b.accumulated));
}

/// Inputs read at an index every invocation shares (saxpy's scale, a parameter block) keep
/// a program on the vector entry as broadcast bindings, read with scalar bounds-checked
/// loads (never the 16-byte lane preload); `y` updated in place stays an ordinary binding.
#[test]
fn shared_index_reads_get_a_vector_entry_with_broadcast_bindings() {
    use common::kernels::{saxpy_user, scale_bias_clamp};
    for (program, broadcast) in [
        (saxpy_user(0), [true, false, false]),
        (saxpy_user(1), [true, false, false]),
        (scale_bias_clamp(1000), [true, false, false]),
    ] {
        let kernel = emit_ptx(&program, None, PtxTarget::sm90()).unwrap();
        let flags: Vec<bool> = kernel.abi.bindings.iter().map(|b| b.broadcast).collect();
        assert_eq!(flags, broadcast);
        assert!(kernel.abi.bindings.iter().all(|b| !b.accumulated));
        let vector = kernel.vector_ptx.as_ref().expect("a vector entry");
        // One 16-byte preload (`x`) and one 16-byte store (`y` or `out`): the broadcast
        // buffer is not preloaded as if indexed by `gid`.
        assert_eq!(vector.matches("ld.global.nc.v4.").count(), 1);
        assert_eq!(vector.matches("st.global.v4.").count(), 1);
        assembles(&program);
    }
}
