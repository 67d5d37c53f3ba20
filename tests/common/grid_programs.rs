//! Programs with grid-wide barriers (`MemoryOrdering::GridSync`), each of which the CUDA
//! backend can run two ways: one cooperative launch with a software grid barrier, or one
//! launch per segment. Used by the codegen gate and by the GPU comparison against
//! vyre-reference.

#![allow(dead_code)]

use super::gpu::{u32_bytes, Rng};
use vyre_foundation::ir::{
    AtomicOp, BinOp, BufferAccess, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program,
    SubgroupReduceOp,
};

/// One program and its inputs.
pub struct GridCase {
    pub name: &'static str,
    pub program: Program,
    pub inputs: Vec<Vec<u8>>,
    /// The reference fails on it (a device fault).
    pub expect_error: bool,
    /// The backend has a cooperative entry for it (one launch with a software grid
    /// barrier, where the grid fits resident); otherwise it launches each segment.
    pub cooperative: bool,
}

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

fn gid() -> Expr {
    Expr::InvocationId { axis: 0 }
}

fn grid_sync() -> Node {
    Node::barrier_with_ordering(MemoryOrdering::GridSync)
}

/// `(gid + shift) % n`: an element another workgroup wrote.
fn elsewhere(shift: u32, n: u32) -> Expr {
    bin(
        BinOp::Mod,
        bin(BinOp::Add, gid(), Expr::u32(shift)),
        Expr::u32(n),
    )
}

/// Three grid barriers: each pass reads what other workgroups wrote in the pass before.
pub fn chained_passes(n: u32) -> GridCase {
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::storage("t0", 1, BufferAccess::ReadWrite, DataType::U32).with_count(n),
            BufferDecl::storage("t1", 2, BufferAccess::ReadWrite, DataType::U32).with_count(n),
            BufferDecl::output("out", 3, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        vec![
            Node::store(
                "t0",
                gid(),
                bin(BinOp::Mul, Expr::load("a", gid()), Expr::u32(3)),
            ),
            grid_sync(),
            Node::let_bind("x", Expr::load("t0", elsewhere(100, n))),
            Node::store("t1", gid(), bin(BinOp::Add, Expr::var("x"), Expr::u32(1))),
            grid_sync(),
            Node::block(vec![
                Node::store("t0", gid(), Expr::load("t1", elsewhere(7, n))),
                grid_sync(),
                Node::store(
                    "out",
                    gid(),
                    bin(BinOp::BitXor, Expr::load("t0", elsewhere(n - 1, n)), gid()),
                ),
            ]),
        ],
    );
    let mut rng = Rng::new(11);
    GridCase {
        name: "three grid barriers, chained passes",
        program,
        inputs: vec![
            rng.bytes_u32(n as usize),
            vec![0; n as usize * 4],
            vec![0; n as usize * 4],
        ],
        expect_error: false,
        cooperative: true,
    }
}

/// Workgroup memory written before a grid barrier and read after it: the reference
/// re-zeroes it for every workgroup of every segment.
pub fn workgroup_memory_across_barrier() -> GridCase {
    let n = 256u32;
    let lid = || Expr::LocalId { axis: 0 };
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::workgroup("sh", 64, DataType::U32),
            BufferDecl::storage("before", 1, BufferAccess::ReadWrite, DataType::U32).with_count(n),
            BufferDecl::output("after", 2, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        vec![
            Node::store("sh", lid(), Expr::load("a", gid())),
            Node::barrier(),
            Node::store(
                "before",
                gid(),
                Expr::load(
                    "sh",
                    bin(
                        BinOp::Mod,
                        bin(BinOp::Add, lid(), Expr::u32(1)),
                        Expr::u32(64),
                    ),
                ),
            ),
            grid_sync(),
            // Odd lanes write, then every lane reads its neighbour: even neighbours must be
            // the fresh zeros, not what the first segment left.
            Node::if_then(
                bin(
                    BinOp::Eq,
                    bin(BinOp::BitAnd, lid(), Expr::u32(1)),
                    Expr::u32(1),
                ),
                vec![Node::store(
                    "sh",
                    lid(),
                    bin(BinOp::Add, gid(), Expr::u32(5)),
                )],
            ),
            Node::barrier(),
            Node::store(
                "after",
                gid(),
                Expr::load("sh", bin(BinOp::BitXor, lid(), Expr::u32(1))),
            ),
        ],
    );
    let mut rng = Rng::new(12);
    GridCase {
        name: "workgroup memory across a grid barrier",
        program,
        inputs: vec![rng.bytes_u32(n as usize), vec![0; n as usize * 4]],
        expect_error: false,
        cooperative: true,
    }
}

/// `Return` in the first segment ends only that segment for those invocations.
pub fn return_inside_segment() -> GridCase {
    let n = 256u32;
    let program = Program::wrapped(
        vec![
            BufferDecl::storage("t", 0, BufferAccess::ReadWrite, DataType::U32).with_count(n),
            BufferDecl::output("out", 1, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        vec![
            Node::if_then(
                bin(
                    BinOp::Eq,
                    bin(BinOp::Mod, gid(), Expr::u32(3)),
                    Expr::u32(0),
                ),
                vec![Node::Return],
            ),
            Node::store("t", gid(), bin(BinOp::Add, gid(), Expr::u32(1000))),
            grid_sync(),
            Node::if_then(
                bin(
                    BinOp::Eq,
                    bin(BinOp::Mod, gid(), Expr::u32(5)),
                    Expr::u32(1),
                ),
                vec![Node::Return],
            ),
            Node::store("out", gid(), Expr::load("t", elsewhere(64, n))),
        ],
    );
    GridCase {
        name: "Return inside a segment",
        program,
        inputs: vec![u32_bytes(&vec![7; n as usize])],
        expect_error: false,
        cooperative: true,
    }
}

/// A case of three segments over `n = 256` i32 elements whose input is `i + 1` except a
/// zero at element 77: `t = a`, then `middle` (which divides by that zero somewhere, so
/// the dispatch fails), then `out` reads `t` three elements on. `workgroup` buffers sit
/// between `t` and `out`.
fn faulting_middle(
    name: &'static str,
    workgroup: Vec<BufferDecl>,
    middle: Vec<Node>,
    cooperative: bool,
) -> GridCase {
    let n = 256u32;
    let mut buffers = vec![
        BufferDecl::read("a", 0, DataType::I32).with_count(n),
        BufferDecl::storage("t", 1, BufferAccess::ReadWrite, DataType::I32).with_count(n),
    ];
    buffers.extend(workgroup);
    buffers.push(BufferDecl::output("out", 2, DataType::I32).with_count(n));
    let mut body = vec![Node::store("t", gid(), Expr::load("a", gid())), grid_sync()];
    body.extend(middle);
    body.extend([
        grid_sync(),
        Node::store("out", gid(), Expr::load("t", elsewhere(3, n))),
    ]);
    let values: Vec<i32> = (0..n as i32)
        .map(|i| if i == 77 { 0 } else { i + 1 })
        .collect();
    GridCase {
        name,
        program: Program::wrapped(buffers, [64, 1, 1], body),
        inputs: vec![
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            vec![0; n as usize * 4],
        ],
        expect_error: true,
        cooperative,
    }
}

/// `v = v + 1000 / divisor`.
fn add_quotient(divisor: Expr) -> Node {
    Node::assign(
        "v",
        bin(
            BinOp::Add,
            Expr::var("v"),
            bin(BinOp::Div, Expr::i32(1000), divisor),
        ),
    )
}

/// A signed division by zero in the second segment of three: the dispatch fails.
pub fn fault_in_second_segment() -> GridCase {
    // The divisor is zero only at element 77.
    let divide = Node::store(
        "t",
        gid(),
        bin(BinOp::Div, Expr::i32(1000), Expr::load("t", gid())),
    );
    faulting_middle("fault in segment 1", Vec::new(), vec![divide], true)
}

/// A division by zero in one lane inside a loop of workgroup barriers, in the middle
/// segment of three: the faulting lane leaves the loop while its workgroup goes on to
/// the loop's later barriers, which in a cooperative entry (where it would wait at the
/// segment's end) would wait for it; the backend launches it split. The dispatch fails,
/// without hanging.
pub fn fault_inside_a_barrier_loop() -> GridCase {
    let lid = || Expr::LocalId { axis: 0 };
    let neighbour = bin(
        BinOp::Mod,
        bin(BinOp::Add, lid(), Expr::u32(1)),
        Expr::u32(64),
    );
    let middle = vec![
        Node::let_bind("v", Expr::load("t", gid())),
        Node::loop_for(
            "i",
            Expr::u32(0),
            Expr::u32(4),
            vec![
                Node::store("sh", lid(), Expr::var("v")),
                Node::barrier(),
                // Element 77 is zero: its left neighbour divides by it at once.
                add_quotient(Expr::load("sh", neighbour)),
                Node::barrier(),
            ],
        ),
        Node::store("t", gid(), Expr::var("v")),
    ];
    let shared = vec![BufferDecl::workgroup("sh", 64, DataType::I32)];
    faulting_middle("fault inside a barrier loop", shared, middle, false)
}

/// A division by zero in one lane inside a loop, then a subgroup reduction, in the
/// middle segment of three: the faulting lane leaves the loop while its warp goes on to
/// the reduction, which in a cooperative entry (where it would wait at the segment's end)
/// would wait for it; the backend launches it split. The dispatch fails, without hanging.
pub fn fault_in_a_loop_before_a_subgroup_reduction() -> GridCase {
    let middle = vec![
        Node::let_bind("v", Expr::load("t", gid())),
        Node::loop_for(
            "i",
            Expr::u32(0),
            Expr::u32(4),
            // Element 77 is zero: element 76 divides by it at once.
            vec![add_quotient(Expr::load("t", elsewhere(1, 256)))],
        ),
        Node::store(
            "t",
            gid(),
            // The reference combines u32 and float lanes only.
            Expr::cast(
                DataType::I32,
                Expr::SubgroupReduce {
                    op: SubgroupReduceOp::Add,
                    value: Box::new(Expr::cast(DataType::U32, Expr::var("v"))),
                },
            ),
        ),
    ];
    faulting_middle(
        "fault in a loop before a subgroup reduction",
        Vec::new(),
        middle,
        false,
    )
}

/// Atomics in one segment, read (and added to again) in the next.
pub fn atomics_across_segments() -> GridCase {
    let n = 256u32;
    let atomic_add = |buffer: &str, index: Expr, value: Expr| Expr::Atomic {
        op: AtomicOp::Add,
        buffer: buffer.into(),
        index: Box::new(index),
        expected: None,
        value: Box::new(value),
        ordering: MemoryOrdering::Relaxed,
    };
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::storage("hist", 1, BufferAccess::ReadWrite, DataType::U32).with_count(8),
            BufferDecl::storage("sum", 2, BufferAccess::ReadWrite, DataType::U32).with_count(1),
            BufferDecl::output("out", 3, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        vec![
            Node::let_bind(
                "old",
                atomic_add(
                    "hist",
                    bin(BinOp::BitAnd, Expr::load("a", gid()), Expr::u32(7)),
                    Expr::u32(1),
                ),
            ),
            grid_sync(),
            Node::let_bind(
                "total",
                Expr::load("hist", bin(BinOp::BitAnd, gid(), Expr::u32(7))),
            ),
            Node::store("out", gid(), Expr::var("total")),
            Node::let_bind("again", atomic_add("sum", Expr::u32(0), Expr::var("total"))),
        ],
    );
    let mut rng = Rng::new(13);
    GridCase {
        name: "atomics across segments",
        program,
        inputs: vec![rng.bytes_u32(n as usize), vec![0; 32], vec![0; 4]],
        expect_error: false,
        cooperative: true,
    }
}

/// A 2-D workgroup shape with grid barriers between passes over a 2-D index space.
pub fn two_dimensional() -> GridCase {
    let (w, h) = (32u32, 32u32);
    let n = w * h;
    let x = || Expr::InvocationId { axis: 0 };
    let y = || Expr::InvocationId { axis: 1 };
    let inside = || {
        bin(
            BinOp::And,
            bin(BinOp::Lt, x(), Expr::u32(w)),
            bin(BinOp::Lt, y(), Expr::u32(h)),
        )
    };
    let flat = |xx: Expr, yy: Expr| bin(BinOp::Add, xx, bin(BinOp::Mul, yy, Expr::u32(w)));
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::storage("t", 1, BufferAccess::ReadWrite, DataType::U32).with_count(n),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [8, 8, 1],
        vec![
            Node::if_then(
                inside(),
                vec![Node::store(
                    "t",
                    flat(x(), y()),
                    bin(
                        BinOp::Add,
                        Expr::load("a", flat(x(), y())),
                        Expr::WorkgroupId { axis: 1 },
                    ),
                )],
            ),
            grid_sync(),
            Node::if_then(
                inside(),
                vec![Node::store(
                    "out",
                    flat(x(), y()),
                    // The transposed element, written by another workgroup.
                    Expr::load("t", flat(y(), x())),
                )],
            ),
        ],
    );
    let mut rng = Rng::new(14);
    GridCase {
        name: "2-D workgroups",
        program,
        inputs: vec![rng.bytes_u32(n as usize), vec![0; n as usize * 4]],
        expect_error: false,
        cooperative: true,
    }
}

/// Every case above (the grid is small enough to be resident on any current GPU).
pub fn all() -> Vec<GridCase> {
    vec![
        chained_passes(256),
        workgroup_memory_across_barrier(),
        return_inside_segment(),
        fault_in_second_segment(),
        atomics_across_segments(),
        two_dimensional(),
        fault_inside_a_barrier_loop(),
        fault_in_a_loop_before_a_subgroup_reduction(),
    ]
}
