//! Hand-written programs that exercise every construct the emitter lowers, each with
//! edge-value inputs. The CPU gate assembles all of them with ptxas; the GPU tests run
//! them and compare with vyre-reference byte for byte.

#![allow(dead_code)]

use super::gpu::{f32_bytes, u32_bytes, Rng};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{
    AtomicOp, BinOp, BufferAccess, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program,
    SubgroupReduceOp, UnOp,
};

/// One program with its inputs.
pub struct Case {
    pub name: String,
    pub program: Program,
    pub inputs: Vec<Vec<u8>>,
    pub config: DispatchConfig,
    /// The reference must fail on this case, and so must the GPU.
    pub expect_error: bool,
}

impl Case {
    pub fn new(name: impl Into<String>, program: Program, inputs: Vec<Vec<u8>>) -> Self {
        Self {
            name: name.into(),
            program,
            inputs,
            config: DispatchConfig::default(),
            expect_error: false,
        }
    }

    pub fn failing(mut self) -> Self {
        self.expect_error = true;
        self
    }
}

const N: u32 = 256;

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

fn un(op: UnOp, v: Expr) -> Expr {
    Expr::UnOp {
        op,
        operand: Box::new(v),
    }
}

fn cast(target: DataType, v: Expr) -> Expr {
    Expr::Cast {
        target,
        value: Box::new(v),
    }
}

fn gid() -> Expr {
    Expr::InvocationId { axis: 0 }
}

fn ld(buffer: &str) -> Expr {
    Expr::load(buffer, gid())
}

/// `out[i] = body(i)` for `i < n`, with the given input buffers.
fn elementwise(inputs: &[(&str, DataType)], out: DataType, n: u32, value: Expr) -> Program {
    Program::wrapped(
        elementwise_buffers(inputs, out, n),
        [64, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, gid(), Expr::u32(n)),
            vec![Node::store("out", gid(), value)],
        )],
    )
}

/// [`elementwise`]'s buffers: the inputs, then `out`, `n` elements each.
fn elementwise_buffers(inputs: &[(&str, DataType)], out: DataType, n: u32) -> Vec<BufferDecl> {
    let mut buffers: Vec<BufferDecl> = inputs
        .iter()
        .enumerate()
        .map(|(i, (name, ty))| BufferDecl::read(name, i as u32, ty.clone()).with_count(n))
        .collect();
    buffers.push(BufferDecl::output("out", inputs.len() as u32, out).with_count(n));
    buffers
}

fn edge_u32(rng: &mut Rng, n: u32) -> Vec<u32> {
    let edges = [
        0,
        1,
        2,
        3,
        7,
        31,
        32,
        33,
        63,
        64,
        0x7FFF_FFFF,
        0x8000_0000,
        0xFFFF_FFFE,
        u32::MAX,
    ];
    (0..n as usize)
        .map(|i| {
            if i < edges.len() * 2 {
                edges[i % edges.len()]
            } else {
                rng.next_u32()
            }
        })
        .collect()
}

fn edge_u32_rotated(rng: &mut Rng, n: u32) -> Vec<u32> {
    let mut v = edge_u32(rng, n);
    // Pair every edge value with every other one in the first rows.
    v[..28].rotate_left(3);
    v
}

fn edge_f32(rng: &mut Rng, n: u32) -> Vec<f32> {
    let bits = [
        0x0000_0000u32,
        0x8000_0000,
        0x3F80_0000,
        0xBF80_0000,
        0x7FC0_0000,
        0xFFC0_1234,
        0x7F80_0000,
        0xFF80_0000,
        0x0000_0001,
        0x8000_0001,
        0x007F_FFFF,
        0x0080_0000,
        0x8080_0000,
        0x7F7F_FFFF,
        0x3F00_0000,
        0xBF00_0000,
        0x4020_0000,
        0xC020_0000,
        0x3FC0_0000,
        0x1E3C_E508,
        0x2000_0000,
        0x0100_0000,
        0x4B00_0001,
        0x4F80_0000,
        0xCF00_0000,
        0x4EFF_FFFF,
        0x3EFF_FFFF,
        0x7F00_0000,
    ];
    (0..n as usize)
        .map(|i| {
            if i < bits.len() * 4 {
                f32::from_bits(bits[i % bits.len()])
            } else {
                // Random finite values across many exponents.
                let raw = rng.next_u32();
                f32::from_bits((raw & 0x8FFF_FFFF) | ((raw % 200 + 20) << 23) & 0x7F80_0000)
            }
        })
        .collect()
}

fn edge_f32_other(rng: &mut Rng, n: u32) -> Vec<f32> {
    let mut v = edge_f32(rng, n);
    // Offset so every special value meets many others.
    v[..112].rotate_left(29);
    v
}

fn edge_i32(rng: &mut Rng, n: u32) -> Vec<u32> {
    let edges = [
        0i32,
        1,
        -1,
        2,
        -2,
        7,
        -7,
        31,
        33,
        i32::MAX,
        i32::MIN,
        i32::MIN + 1,
        1000,
        -1000,
    ];
    (0..n as usize)
        .map(|i| {
            if i < edges.len() * 2 {
                edges[i % edges.len()] as u32
            } else {
                rng.next_u32()
            }
        })
        .collect()
}

/// Every u32 BinOp over edge values.
pub fn u32_binops() -> Vec<Case> {
    use BinOp::*;
    let mut rng = Rng::new(1);
    let a = u32_bytes(&edge_u32(&mut rng, N));
    let b = u32_bytes(&edge_u32_rotated(&mut rng, N));
    [
        Add,
        Sub,
        Mul,
        Div,
        Mod,
        BitAnd,
        BitOr,
        BitXor,
        Shl,
        Shr,
        Eq,
        Ne,
        Lt,
        Gt,
        Le,
        Ge,
        And,
        Or,
        AbsDiff,
        Min,
        Max,
        SaturatingAdd,
        SaturatingSub,
        SaturatingMul,
        MulHigh,
        RotateLeft,
        RotateRight,
        WrappingAdd,
        WrappingSub,
    ]
    .into_iter()
    .map(|op| {
        let program = elementwise(
            &[("a", DataType::U32), ("b", DataType::U32)],
            DataType::U32,
            N,
            bin(op, ld("a"), ld("b")),
        );
        Case::new(format!("u32 {op:?}"), program, vec![a.clone(), b.clone()])
    })
    .collect()
}

/// i32 BinOps (divisors made non-zero and MIN/-1 avoided where the reference errors).
pub fn i32_binops() -> Vec<Case> {
    use BinOp::*;
    let mut rng = Rng::new(2);
    let a_vals = edge_i32(&mut rng, N);
    let mut b_vals = edge_i32(&mut rng, N);
    b_vals[..28].rotate_left(5);
    let safe_b: Vec<u32> = a_vals
        .iter()
        .zip(&b_vals)
        .map(|(a, b)| {
            if *b == 0 || (*a == i32::MIN as u32 && *b == u32::MAX) {
                3
            } else {
                *b
            }
        })
        .collect();
    let (a, b, safe) = (u32_bytes(&a_vals), u32_bytes(&b_vals), u32_bytes(&safe_b));
    [
        Add,
        Sub,
        Mul,
        Div,
        Mod,
        BitAnd,
        BitOr,
        BitXor,
        Eq,
        Ne,
        Lt,
        Gt,
        Le,
        Ge,
        // The validator rejects i32 And/Or/AbsDiff/Saturating*; they are not i32 ops.
        Min,
        Max,
        WrappingAdd,
        WrappingSub,
    ]
    .into_iter()
    .map(|op| {
        let divisor = if matches!(op, Div | Mod) {
            safe.clone()
        } else {
            b.clone()
        };
        let out = if matches!(op, Eq | Ne | Lt | Gt | Le | Ge) {
            DataType::U32
        } else {
            DataType::I32
        };
        let program = elementwise(
            &[("a", DataType::I32), ("b", DataType::I32)],
            out,
            N,
            bin(op, ld("a"), ld("b")),
        );
        Case::new(format!("i32 {op:?}"), program, vec![a.clone(), divisor])
    })
    .collect()
}

/// f32 BinOps over NaN, ±0, ±inf, subnormals, boundary and random values.
pub fn f32_binops() -> Vec<Case> {
    use BinOp::*;
    let mut rng = Rng::new(3);
    let a = f32_bytes(&edge_f32(&mut rng, N));
    let b = f32_bytes(&edge_f32_other(&mut rng, N));
    [Add, Sub, Mul, Div, Min, Max, Eq, Ne, Lt, Gt, Le, Ge]
        .into_iter()
        .map(|op| {
            let out = if matches!(op, Eq | Ne | Lt | Gt | Le | Ge) {
                DataType::U32
            } else {
                DataType::F32
            };
            let program = elementwise(
                &[("a", DataType::F32), ("b", DataType::F32)],
                out,
                N,
                bin(op, ld("a"), ld("b")),
            );
            Case::new(format!("f32 {op:?}"), program, vec![a.clone(), b.clone()])
        })
        .collect()
}

/// Integer and float unary operators.
pub fn unops() -> Vec<Case> {
    use UnOp::*;
    let mut rng = Rng::new(4);
    let ints = u32_bytes(&edge_u32(&mut rng, N));
    let floats = f32_bytes(&edge_f32(&mut rng, N));
    let mut cases = Vec::new();
    for op in [
        Negate,
        BitNot,
        LogicalNot,
        Popcount,
        Clz,
        Ctz,
        ReverseBits,
        Unpack4Low,
        Unpack4High,
        Unpack8Low,
        Unpack8High,
    ] {
        let program = elementwise(
            &[("a", DataType::U32)],
            DataType::U32,
            N,
            un(op.clone(), ld("a")),
        );
        cases.push(Case::new(
            format!("u32 {op:?}"),
            program,
            vec![ints.clone()],
        ));
    }
    for op in [BitNot, Popcount, Clz, Ctz, ReverseBits] {
        let program = elementwise(
            &[("a", DataType::I32)],
            DataType::I32,
            N,
            un(op.clone(), ld("a")),
        );
        cases.push(Case::new(
            format!("i32 {op:?}"),
            program,
            vec![ints.clone()],
        ));
    }
    for op in [
        Negate,
        Abs,
        Sqrt,
        InverseSqrt,
        Reciprocal,
        Floor,
        Ceil,
        Round,
        Trunc,
        Sign,
        Sin,
        Cos,
        Tan,
        Asin,
        Acos,
        Atan,
        Sinh,
        Cosh,
        Tanh,
        Exp,
        Exp2,
        Log,
        Log2,
    ] {
        let program = elementwise(
            &[("a", DataType::F32)],
            DataType::F32,
            N,
            un(op.clone(), ld("a")),
        );
        cases.push(Case::new(
            format!("f32 {op:?}"),
            program,
            vec![floats.clone()],
        ));
    }
    for op in [IsNan, IsInf, IsFinite] {
        let program = elementwise(
            &[("a", DataType::F32)],
            DataType::U32,
            N,
            un(op.clone(), ld("a")),
        );
        cases.push(Case::new(
            format!("f32 {op:?}"),
            program,
            vec![floats.clone()],
        ));
    }
    cases
}

/// Casts among u32, i32, f32, bool and the narrow types.
pub fn casts() -> Vec<Case> {
    let mut rng = Rng::new(5);
    let ints = u32_bytes(&edge_u32(&mut rng, N));
    let floats = f32_bytes(&edge_f32(&mut rng, N));
    let mut cases = Vec::new();
    let pairs: [(DataType, DataType, DataType); 16] = [
        (DataType::U32, DataType::I32, DataType::I32),
        (DataType::I32, DataType::U32, DataType::U32),
        (DataType::U32, DataType::F32, DataType::F32),
        (DataType::I32, DataType::F32, DataType::F32),
        (DataType::F32, DataType::U32, DataType::U32),
        (DataType::F32, DataType::I32, DataType::I32),
        (DataType::F32, DataType::Bool, DataType::U32),
        (DataType::U32, DataType::Bool, DataType::U32),
        (DataType::I32, DataType::Bool, DataType::U32),
        (DataType::U32, DataType::U8, DataType::U32),
        (DataType::U32, DataType::U16, DataType::U32),
        (DataType::U32, DataType::I8, DataType::I32),
        (DataType::U32, DataType::I16, DataType::I32),
        (DataType::Bool, DataType::U32, DataType::U32),
        (DataType::Bool, DataType::F32, DataType::F32),
        (DataType::I32, DataType::I32, DataType::I32),
    ];
    for (from, to, out) in pairs {
        let data = if from == DataType::F32 {
            floats.clone()
        } else {
            ints.clone()
        };
        // A narrow cast's value must be widened again before it can be stored.
        let value = match to {
            DataType::U8 | DataType::U16 => cast(DataType::U32, cast(to.clone(), ld("a"))),
            DataType::I8 | DataType::I16 => cast(DataType::I32, cast(to.clone(), ld("a"))),
            _ => cast(to.clone(), ld("a")),
        };
        let program = elementwise(&[("a", from.clone())], out, N, value);
        cases.push(Case::new(
            format!("cast {from} -> {to}"),
            program,
            vec![data],
        ));
    }
    // Narrow loads are raw bytes: zero-extended by a direct cast, sign-extended via I8.
    let bytes: Vec<u8> = (0..N)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(200))
        .collect();
    cases.push(Case::new(
        "u8 load zero-extends",
        elementwise(
            &[("a", DataType::U8)],
            DataType::U32,
            N,
            cast(DataType::U32, ld("a")),
        ),
        vec![bytes.clone()],
    ));
    cases.push(Case::new(
        "i8 load then I8 cast sign-extends",
        elementwise(
            &[("a", DataType::I8)],
            DataType::I32,
            N,
            cast(DataType::I32, cast(DataType::I8, ld("a"))),
        ),
        vec![bytes.clone()],
    ));
    cases.push(Case::new(
        "u16 load stores its raw bytes",
        elementwise(&[("a", DataType::U16)], DataType::U16, N / 2, ld("a")),
        vec![bytes[..N as usize].to_vec()],
    ));
    cases.push(Case::new(
        "u8 cast stored into a u8 buffer",
        elementwise(
            &[("a", DataType::U32)],
            DataType::U8,
            N,
            cast(DataType::U8, ld("a")),
        ),
        vec![ints.clone()],
    ));
    cases.push(Case::new(
        "bool buffer loads raw words",
        elementwise(
            &[("a", DataType::Bool)],
            DataType::U32,
            N,
            cast(DataType::U32, ld("a")),
        ),
        vec![ints],
    ));
    cases
}

/// Select, Fma, Let/Assign, If, Loop, Block, early Return, OOB access.
pub fn control_and_memory() -> Vec<Case> {
    let mut rng = Rng::new(6);
    let ints = u32_bytes(&edge_u32(&mut rng, N));
    let f1 = f32_bytes(&edge_f32(&mut rng, N));
    let f2 = f32_bytes(&edge_f32_other(&mut rng, N));
    let mut cases = Vec::new();
    cases.push(Case::new(
        "select",
        elementwise(
            &[("a", DataType::U32)],
            DataType::U32,
            N,
            Expr::select(
                bin(BinOp::Gt, ld("a"), Expr::u32(1000)),
                ld("a"),
                Expr::u32(7),
            ),
        ),
        vec![ints.clone()],
    ));
    cases.push(Case::new(
        "fma is fused once, not contracted elsewhere",
        elementwise(
            &[("a", DataType::F32), ("b", DataType::F32)],
            DataType::F32,
            N,
            bin(
                BinOp::Add,
                Expr::Fma {
                    a: Box::new(ld("a")),
                    b: Box::new(ld("b")),
                    c: Box::new(ld("a")),
                },
                bin(BinOp::Mul, ld("a"), ld("b")),
            ),
        ),
        vec![f1.clone(), f2.clone()],
    ));
    // Loop with Let/Assign accumulation and an early return inside the loop body.
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(N),
            BufferDecl::output("out", 1, DataType::U32).with_count(N),
        ],
        [64, 1, 1],
        vec![
            Node::let_bind("acc", Expr::u32(0)),
            Node::loop_for(
                "k",
                Expr::u32(0),
                bin(BinOp::BitAnd, gid(), Expr::u32(15)),
                vec![
                    Node::assign("acc", bin(BinOp::Add, Expr::var("acc"), Expr::var("k"))),
                    Node::if_then(
                        bin(BinOp::Eq, Expr::var("k"), Expr::u32(9)),
                        vec![Node::store("out", gid(), Expr::u32(0xDEAD)), Node::Return],
                    ),
                ],
            ),
            Node::Block(vec![
                Node::let_bind("scoped", bin(BinOp::Mul, Expr::var("acc"), Expr::u32(3))),
                Node::store("out", gid(), bin(BinOp::Add, Expr::var("scoped"), ld("a"))),
            ]),
        ],
    );
    cases.push(Case::new(
        "loop, let/assign, early return in loop, block",
        program,
        vec![ints.clone()],
    ));
    // Empty and reversed loop ranges run nothing.
    let program = Program::wrapped(
        vec![BufferDecl::output("out", 0, DataType::U32).with_count(4)],
        [1, 1, 1],
        vec![
            Node::let_bind("c", Expr::u32(0)),
            Node::loop_for(
                "k",
                Expr::u32(5),
                Expr::u32(3),
                vec![Node::assign("c", Expr::u32(99))],
            ),
            Node::loop_for(
                "j",
                Expr::u32(2),
                Expr::u32(5),
                vec![Node::assign(
                    "c",
                    bin(BinOp::Add, Expr::var("c"), Expr::var("j")),
                )],
            ),
            Node::store("out", Expr::u32(0), Expr::var("c")),
        ],
    );
    cases.push(Case::new(
        "loop bounds are exclusive; reversed range is empty",
        program,
        vec![],
    ));
    // Out-of-bounds loads read zero, out-of-bounds stores are dropped.
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(8),
            BufferDecl::output("out", 1, DataType::U32).with_count(16),
        ],
        [16, 1, 1],
        vec![
            Node::store(
                "out",
                gid(),
                bin(BinOp::Add, Expr::load("a", gid()), Expr::u32(1)),
            ),
            Node::store(
                "out",
                bin(BinOp::Add, gid(), Expr::u32(1000)),
                Expr::u32(77),
            ),
        ],
    );
    cases.push(Case::new(
        "out-of-bounds load reads 0, store is dropped",
        program,
        vec![u32_bytes(&[9, 8, 7, 6, 5, 4, 3, 2])],
    ));
    // BufLen reports the supplied length of a runtime-sized input.
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32),
            BufferDecl::output("out", 1, DataType::U32).with_count(1),
        ],
        [1, 1, 1],
        vec![Node::store("out", Expr::u32(0), Expr::buf_len("a"))],
    );
    cases.push(Case::new(
        "buf_len",
        program,
        vec![u32_bytes(&[1, 2, 3, 4, 5])],
    ));
    cases
}

/// Workgroup memory (zeroed per workgroup), barriers, 2D workgroups, atomics.
pub fn workgroup_cases() -> Vec<Case> {
    let mut rng = Rng::new(7);
    let ints = u32_bytes(&edge_u32(&mut rng, N));
    let mut cases = Vec::new();
    let lid = Expr::LocalId { axis: 0 };
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(N),
            BufferDecl::output("out", 1, DataType::U32).with_count(N),
            BufferDecl::workgroup("tile", 64, DataType::U32),
        ],
        [64, 1, 1],
        vec![
            // Read-before-write sees the zero fill.
            Node::let_bind("before", Expr::load("tile", lid.clone())),
            Node::barrier_with_ordering(MemoryOrdering::SeqCst),
            Node::store(
                "tile",
                lid.clone(),
                bin(BinOp::Add, ld("a"), Expr::var("before")),
            ),
            Node::barrier_with_ordering(MemoryOrdering::SeqCst),
            Node::store(
                "out",
                gid(),
                Expr::load("tile", bin(BinOp::Sub, Expr::u32(63), lid.clone())),
            ),
        ],
    );
    cases.push(Case::new(
        "workgroup reverse through shared memory and barriers",
        program,
        vec![ints.clone()],
    ));
    let program = Program::wrapped(
        vec![BufferDecl::output("out", 0, DataType::U32).with_count(24 * 24)],
        [8, 8, 1],
        vec![Node::if_then(
            bin(
                BinOp::And,
                bin(BinOp::Lt, Expr::InvocationId { axis: 0 }, Expr::u32(24)),
                bin(BinOp::Lt, Expr::InvocationId { axis: 1 }, Expr::u32(24)),
            ),
            vec![Node::store(
                "out",
                bin(
                    BinOp::Add,
                    Expr::InvocationId { axis: 0 },
                    bin(BinOp::Mul, Expr::InvocationId { axis: 1 }, Expr::u32(24)),
                ),
                bin(
                    BinOp::BitOr,
                    bin(BinOp::Shl, Expr::WorkgroupId { axis: 1 }, Expr::u32(16)),
                    bin(
                        BinOp::BitOr,
                        bin(BinOp::Shl, Expr::LocalId { axis: 1 }, Expr::u32(8)),
                        Expr::LocalId { axis: 0 },
                    ),
                ),
            )],
        )],
    );
    cases.push(Case::new("2D workgroup ids", program, vec![]));
    // Two passes across workgroups: the second reads what other workgroups wrote in the
    // first, which needs a grid-wide barrier (one cooperative launch, or split launches).
    let n = 256u32;
    let shifted = bin(
        BinOp::Mod,
        bin(BinOp::Add, gid(), Expr::u32(100)),
        Expr::u32(n),
    );
    let two_pass = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::storage("tmp", 1, BufferAccess::ReadWrite, DataType::U32).with_count(n),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        vec![
            Node::let_bind("x", bin(BinOp::Mul, ld("a"), Expr::u32(3))),
            Node::store("tmp", gid(), Expr::var("x")),
            Node::barrier_with_ordering(MemoryOrdering::GridSync),
            Node::let_bind("y", Expr::load("tmp", shifted)),
            Node::store("out", gid(), bin(BinOp::Add, Expr::var("y"), ld("a"))),
        ],
    );
    cases.push(Case::new(
        "grid-wide barrier between two passes",
        two_pass,
        vec![ints.clone(), vec![0; n as usize * 4]],
    ));
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(N),
            BufferDecl::storage("hist", 1, BufferAccess::ReadWrite, DataType::U32).with_count(8),
        ],
        [64, 1, 1],
        vec![Node::let_bind(
            "old",
            Expr::Atomic {
                op: AtomicOp::Add,
                buffer: "hist".into(),
                index: Box::new(bin(BinOp::BitAnd, ld("a"), Expr::u32(7))),
                expected: None,
                value: Box::new(Expr::u32(1)),
                ordering: MemoryOrdering::Relaxed,
            },
        )],
    );
    cases.push(Case::new(
        "atomic add histogram",
        program,
        vec![ints.clone(), vec![0; 32]],
    ));
    cases.extend(discarded_atomic_cases());
    cases
}

/// Atomics whose old value is never read. `acc` is touched only by literal-index atomics
/// of one operator, so they fold into per-workgroup partials in shared memory (one slot
/// every lane hits, one behind a branch, one out of bounds, and lanes that `Return` before
/// some of them); `spread` takes a warp-uniform computed index and a per-lane index with an
/// out-of-bounds slot (warp-aggregated `red` when the lanes agree, per-lane otherwise).
/// With a barrier in the program, the literal-index atomics stay warp-aggregated global
/// `red`s. The operators are order-independent, so the reference's sequential result is
/// exact.
fn discarded_atomic_cases() -> Vec<Case> {
    let n = 1000u32;
    let mut rng = Rng::new(17);
    let ints = u32_bytes(&edge_u32(&mut rng, n));
    let slots = 8u32;
    let atomic = |op: AtomicOp, buffer: &str, index: Expr, ordering: MemoryOrdering| Expr::Atomic {
        op,
        buffer: buffer.into(),
        index: Box::new(index),
        expected: None,
        value: Box::new(ld("a")),
        ordering,
    };
    let mut cases = Vec::new();
    for (op, barrier) in [
        (AtomicOp::Add, false),
        (AtomicOp::Or, false),
        (AtomicOp::And, false),
        (AtomicOp::Xor, false),
        (AtomicOp::Min, false),
        (AtomicOp::Max, false),
        (AtomicOp::LruUpdate, false),
        (AtomicOp::Add, true),
        (AtomicOp::Min, true),
    ] {
        let warp = bin(BinOp::Div, gid(), Expr::u32(32));
        let mut body = vec![
            Node::let_bind(
                "one_slot",
                atomic(op, "acc", Expr::u32(0), MemoryOrdering::SeqCst),
            ),
            Node::let_bind(
                "warp_slot",
                atomic(
                    op,
                    "spread",
                    bin(
                        BinOp::Add,
                        Expr::u32(1),
                        bin(BinOp::BitAnd, warp, Expr::u32(1)),
                    ),
                    MemoryOrdering::Relaxed,
                ),
            ),
            Node::let_bind(
                "lane_slot",
                atomic(
                    op,
                    "spread",
                    bin(
                        BinOp::Add,
                        Expr::u32(5),
                        bin(BinOp::BitAnd, ld("a"), Expr::u32(3)),
                    ),
                    MemoryOrdering::AcqRel,
                ),
            ),
            Node::if_then(
                bin(
                    BinOp::Eq,
                    bin(BinOp::Mod, gid(), Expr::u32(5)),
                    Expr::u32(4),
                ),
                vec![Node::Return],
            ),
            Node::if_then(
                bin(
                    BinOp::Ne,
                    bin(BinOp::Mod, gid(), Expr::u32(3)),
                    Expr::u32(0),
                ),
                vec![Node::let_bind(
                    "some_lanes",
                    atomic(op, "acc", Expr::u32(3), MemoryOrdering::Release),
                )],
            ),
            Node::let_bind(
                "out_of_bounds",
                atomic(op, "acc", Expr::u32(slots + 1), MemoryOrdering::SeqCst),
            ),
        ];
        if barrier {
            body.insert(1, Node::barrier_with_ordering(MemoryOrdering::SeqCst));
        }
        let program = Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::U32).with_count(n),
                BufferDecl::storage("acc", 1, BufferAccess::ReadWrite, DataType::U32)
                    .with_count(slots),
                BufferDecl::storage("spread", 2, BufferAccess::ReadWrite, DataType::U32)
                    .with_count(slots),
            ],
            [64, 1, 1],
            body,
        );
        // Min and And start from all ones so they have something to lower.
        let start = if matches!(op, AtomicOp::Min | AtomicOp::And) {
            u32::MAX
        } else {
            0x0F0F_0F0F
        };
        let start = u32_bytes(&vec![start; slots as usize]);
        let how = if barrier {
            "warp-aggregated red"
        } else {
            "workgroup partials"
        };
        cases.push(Case::new(
            format!("discarded atomic {op:?} ({how})"),
            program,
            vec![ints.clone(), start.clone(), start],
        ));
    }
    cases
}

/// `out[gid] = value` over `n` invocations of `workgroup`-sized groups, no bounds guard
/// (subgroup operations need every lane present).
fn subgroup_program(
    inputs: &[(&str, DataType)],
    out: DataType,
    n: u32,
    workgroup: u32,
    value: Expr,
) -> Program {
    let mut buffers: Vec<BufferDecl> = inputs
        .iter()
        .enumerate()
        .map(|(i, (name, ty))| BufferDecl::read(name, i as u32, ty.clone()).with_count(n))
        .collect();
    buffers.push(BufferDecl::output("out", inputs.len() as u32, out).with_count(n));
    Program::wrapped(
        buffers,
        [workgroup, 1, 1],
        vec![Node::store("out", gid(), value)],
    )
}

/// Ballot, shuffle and reduce over full and short (48-lane workgroup) subgroups.
pub fn subgroup_cases() -> Vec<Case> {
    let mut rng = Rng::new(8);
    let mut cases = Vec::new();
    for workgroup in [64u32, 48] {
        let n = workgroup * 2;
        let ints = u32_bytes(
            &(0..n)
                .map(|_| rng.next_u32() % 1000 + 1)
                .collect::<Vec<_>>(),
        );
        let lanes = u32_bytes(&(0..n).map(|i| (i * 7) % 40).collect::<Vec<_>>());
        let floats = f32_bytes(&edge_f32(&mut rng, n));
        let mut big_small: Vec<f32> = (0..n)
            .map(|i| match i % 32 {
                0 => 1e8,
                31 => -1e8,
                _ => 1.0,
            })
            .collect();
        big_small[5] = -0.0;
        let big_small = f32_bytes(&big_small);
        let odd = bin(
            BinOp::Eq,
            bin(BinOp::BitAnd, ld("a"), Expr::u32(1)),
            Expr::u32(1),
        );
        cases.push(Case::new(
            format!("subgroup ballot, workgroup {workgroup}"),
            subgroup_program(
                &[("a", DataType::U32)],
                DataType::U32,
                n,
                workgroup,
                Expr::SubgroupBallot {
                    cond: Box::new(odd),
                },
            ),
            vec![ints.clone()],
        ));
        for (name, ty, data) in [
            ("u32", DataType::U32, ints.clone()),
            ("f32", DataType::F32, floats.clone()),
        ] {
            cases.push(Case::new(
                format!("subgroup shuffle {name}, workgroup {workgroup}"),
                subgroup_program(
                    &[("a", ty.clone()), ("lane", DataType::U32)],
                    ty.clone(),
                    n,
                    workgroup,
                    Expr::SubgroupShuffle {
                        value: Box::new(ld("a")),
                        lane: Box::new(ld("lane")),
                    },
                ),
                vec![data, lanes.clone()],
            ));
        }
        for op in [
            SubgroupReduceOp::Add,
            SubgroupReduceOp::Mul,
            SubgroupReduceOp::Min,
            SubgroupReduceOp::Max,
            SubgroupReduceOp::And,
            SubgroupReduceOp::Or,
            SubgroupReduceOp::Xor,
        ] {
            cases.push(Case::new(
                format!("subgroup reduce {op:?} u32, workgroup {workgroup}"),
                subgroup_program(
                    &[("a", DataType::U32)],
                    DataType::U32,
                    n,
                    workgroup,
                    Expr::SubgroupReduce {
                        op,
                        value: Box::new(ld("a")),
                    },
                ),
                vec![ints.clone()],
            ));
        }
        for op in [
            SubgroupReduceOp::Add,
            SubgroupReduceOp::Mul,
            SubgroupReduceOp::Min,
            SubgroupReduceOp::Max,
        ] {
            for (label, data) in [
                ("edge", floats.clone()),
                ("order-sensitive", big_small.clone()),
            ] {
                cases.push(Case::new(
                    format!("subgroup reduce {op:?} f32 {label}, workgroup {workgroup}"),
                    subgroup_program(
                        &[("a", DataType::F32)],
                        DataType::F32,
                        n,
                        workgroup,
                        Expr::SubgroupReduce {
                            op,
                            value: Box::new(ld("a")),
                        },
                    ),
                    vec![data],
                ));
            }
        }
    }
    // Collectives inside data-dependent branches: the reference reads every lane of the
    // chunk (from its snapshot), in or out of the branch.
    let n = 64u32;
    let vals = u32_bytes(&(0..n).map(|i| i * 5 + 1).collect::<Vec<_>>());
    let fvals = f32_bytes(&(0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect::<Vec<_>>());
    let guarded = |value: Expr, ty: DataType, cond: Expr| {
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, ty.clone()).with_count(n),
                BufferDecl::output("out", 1, ty).with_count(n),
            ],
            [64, 1, 1],
            vec![
                Node::let_bind("idx", gid()),
                Node::let_bind("v", Expr::load("a", Expr::var("idx"))),
                Node::if_then(cond, vec![Node::store("out", Expr::var("idx"), value)]),
            ],
        )
    };
    let below_40 = bin(BinOp::Lt, Expr::var("idx"), Expr::u32(40));
    let every_third = bin(
        BinOp::Eq,
        bin(BinOp::Mod, Expr::var("idx"), Expr::u32(3)),
        Expr::u32(0),
    );
    cases.push(Case::new(
        "ballot inside a bounds guard reads every lane",
        guarded(
            Expr::SubgroupBallot {
                cond: Box::new(bin(
                    BinOp::Eq,
                    bin(BinOp::BitAnd, Expr::var("v"), Expr::u32(2)),
                    Expr::u32(2),
                )),
            },
            DataType::U32,
            below_40.clone(),
        ),
        vec![vals.clone()],
    ));
    cases.push(Case::new(
        "shuffle inside a data-dependent branch",
        guarded(
            Expr::SubgroupShuffle {
                value: Box::new(Expr::var("v")),
                lane: Box::new(bin(BinOp::BitXor, Expr::var("idx"), Expr::u32(5))),
            },
            DataType::U32,
            every_third.clone(),
        ),
        vec![vals],
    ));
    cases.push(Case::new(
        "f32 reduce inside a data-dependent branch",
        guarded(
            Expr::SubgroupReduce {
                op: SubgroupReduceOp::Add,
                value: Box::new(Expr::var("v")),
            },
            DataType::F32,
            every_third,
        ),
        vec![fvals],
    ));
    cases
}

/// F16/F64/I64/U64/Vec2U32 buffers and the reference's raw-byte casts (F16/BF16 in depth:
/// `half_programs.rs`).
pub fn wide_and_raw_type_cases() -> Vec<Case> {
    let mut rng = Rng::new(9);
    let n = 64u32;
    let raw16: Vec<u8> = (0..n * 2)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(3))
        .collect();
    let doubles: Vec<f64> = [
        0.0,
        -0.0,
        1.0,
        -1.5,
        1e300,
        -1e300,
        1e-300,
        4294967295.0,
        4294967296.0,
        -1.0,
        3.4e38,
        3.5e38,
        1e-40,
        0.1,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ]
    .iter()
    .copied()
    .chain([
        f64::from_bits(0x7FF8_0000_0000_1234),
        f64::from_bits(0xFFF0_0000_0000_0001),
    ])
    .cycle()
    .take(n as usize)
    .collect();
    let doubles: Vec<u8> = doubles.iter().flat_map(|d| d.to_le_bytes()).collect();
    let wide: Vec<u8> = (0..n * 2)
        .flat_map(|_| rng.next_u32().to_le_bytes())
        .collect();
    let ints = u32_bytes(&edge_u32(&mut rng, n));
    let mut cases = vec![
        Case::new(
            "f16 buffer round-trips through f32",
            elementwise(&[("a", DataType::F16)], DataType::F16, n, ld("a")),
            vec![raw16.clone()],
        ),
        Case::new(
            "f64 buffer copies raw bits",
            elementwise(&[("a", DataType::F64)], DataType::F64, n, ld("a")),
            vec![doubles.clone()],
        ),
        Case::new(
            "vec2u32 buffer copies",
            elementwise(&[("a", DataType::Vec2U32)], DataType::Vec2U32, n, ld("a")),
            vec![wide.clone()],
        ),
        Case::new(
            "u32 cast to vec2u32 zero-pads",
            elementwise(
                &[("a", DataType::U32)],
                DataType::Vec2U32,
                n,
                cast(DataType::Vec2U32, ld("a")),
            ),
            vec![ints.clone()],
        ),
        Case::new(
            "i64 load widened to u64",
            elementwise(
                &[("a", DataType::I64)],
                DataType::U64,
                n,
                cast(DataType::U64, ld("a")),
            ),
            vec![wide.clone()],
        ),
        Case::new(
            "i32 sign-extends to u64",
            elementwise(
                &[("a", DataType::I32)],
                DataType::U64,
                n,
                cast(DataType::U64, ld("a")),
            ),
            vec![ints.clone()],
        ),
    ];
    let wide16: Vec<u8> = (0..n * 4)
        .flat_map(|_| rng.next_u32().to_le_bytes())
        .collect();
    cases.push(Case::new(
        "vec4u32 buffer copies",
        elementwise(&[("a", DataType::Vec4U32)], DataType::Vec4U32, n, ld("a")),
        vec![wide16.clone()],
    ));
    cases.push(Case::new(
        "u32 cast to vec4u32 zero-pads",
        elementwise(
            &[("a", DataType::U32)],
            DataType::Vec4U32,
            n,
            cast(DataType::Vec4U32, ld("a")),
        ),
        vec![ints.clone()],
    ));
    cases.push(Case::new(
        "vec4u32 cast to vec2u32 keeps the low half",
        elementwise(
            &[("a", DataType::Vec4U32)],
            DataType::Vec2U32,
            n,
            cast(DataType::Vec2U32, ld("a")),
        ),
        vec![wide16.clone()],
    ));
    cases.push(Case::new(
        "vec4u32 selected and rebound",
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::Vec4U32).with_count(n),
                BufferDecl::read("b", 1, DataType::U32).with_count(n),
                BufferDecl::output("out", 2, DataType::Vec4U32).with_count(n),
            ],
            [64, 1, 1],
            vec![
                Node::let_bind("w", ld("a")),
                Node::let_bind(
                    "pick",
                    Expr::select(
                        bin(
                            BinOp::Eq,
                            bin(BinOp::BitAnd, ld("b"), Expr::u32(1)),
                            Expr::u32(1),
                        ),
                        Expr::var("w"),
                        cast(DataType::Vec4U32, ld("b")),
                    ),
                ),
                Node::store("out", gid(), Expr::var("pick")),
            ],
        ),
        vec![wide16, ints.clone()],
    ));
    for op in [BinOp::Lt, BinOp::Eq] {
        let out = if matches!(op, BinOp::Lt | BinOp::Eq) {
            DataType::U32
        } else {
            DataType::U64
        };
        cases.push(Case::new(
            format!("u64 {op:?}"),
            elementwise(
                &[("a", DataType::U64), ("b", DataType::U64)],
                out,
                n,
                bin(op, ld("a"), ld("b")),
            ),
            vec![wide.clone(), wide.iter().rev().copied().collect()],
        ));
    }
    cases
}

/// Async copies: zero-fill past the source's end, truncation at the destination's end.
pub fn async_copy_cases() -> Vec<Case> {
    let source = u32_bytes(&(0..16).map(|i| 0x0101_0101 * (i + 1)).collect::<Vec<_>>());
    let copy = |store: bool, offset: u32, size: u32| {
        let start = if store {
            Node::AsyncStore {
                source: "a".into(),
                destination: "out".into(),
                offset: Box::new(Expr::u32(offset)),
                size: Box::new(Expr::u32(size)),
                tag: "t".into(),
            }
        } else {
            Node::AsyncLoad {
                source: "a".into(),
                destination: "out".into(),
                offset: Box::new(Expr::u32(offset)),
                size: Box::new(Expr::u32(size)),
                tag: "t".into(),
            }
        };
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::U32).with_count(16),
                BufferDecl::output("out", 1, DataType::U32).with_count(8),
            ],
            [4, 1, 1],
            vec![Node::if_then(
                bin(BinOp::Eq, gid(), Expr::u32(0)),
                vec![start, Node::AsyncWait { tag: "t".into() }],
            )],
        )
    };
    vec![
        Case::new(
            "async load past the source end zero-fills",
            copy(false, 52, 40),
            vec![source.clone()],
        ),
        Case::new(
            "async load inside the source",
            copy(false, 3, 17),
            vec![source.clone()],
        ),
        Case::new(
            "async store truncates at the destination end",
            copy(true, 6, 30),
            vec![source],
        ),
    ]
}

fn async_copy(store: bool, source: &str, destination: &str, offset: Expr, size: Expr) -> Node {
    let (source, destination, tag) = (source.into(), destination.into(), "t".into());
    let (offset, size) = (Box::new(offset), Box::new(size));
    if store {
        Node::AsyncStore {
            source,
            destination,
            offset,
            size,
            tag,
        }
    } else {
        Node::AsyncLoad {
            source,
            destination,
            offset,
            size,
            tag,
        }
    }
}

fn async_wait() -> Node {
    Node::AsyncWait { tag: "t".into() }
}

/// Async copies whose start and wait are not next to each other in one block, and the
/// reference's run-time errors for unpaired ones. Each invocation below 8 copies 8 bytes
/// of `a` into its own 8 bytes of `out` (`out[2g..2g+2]`) and stores plainly only at
/// `out[16 + g]`, so no two invocations race.
pub fn async_split_cases() -> Vec<Case> {
    // Odd at 2, 3, 4, 8, 9, 10, ...: the branches below diverge within a workgroup.
    let a = u32_bytes(
        &(0..16)
            .map(|i| 0x0101_0101 * (i + 1) + u32::from(i % 3 == 0))
            .collect::<Vec<_>>(),
    );
    let program = |body: Vec<Node>| {
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::U32).with_count(16),
                BufferDecl::output("out", 1, DataType::U32).with_count(24),
            ],
            [4, 1, 1],
            vec![Node::if_then(bin(BinOp::Lt, gid(), Expr::u32(8)), body)],
        )
    };
    let own = || bin(BinOp::Mul, gid(), Expr::u32(8));
    let start = || async_copy(true, "a", "out", own(), Expr::u32(8));
    let odd = || {
        bin(
            BinOp::Eq,
            bin(BinOp::BitAnd, ld("a"), Expr::u32(1)),
            Expr::u32(1),
        )
    };
    let mark = |v: u32| Node::store("out", bin(BinOp::Add, gid(), Expr::u32(16)), Expr::u32(v));
    let case = |name: &str, body: Vec<Node>| Case::new(name, program(body), vec![a.clone()]);
    vec![
        case(
            "async start before an If, wait in both arms",
            vec![
                start(),
                Node::if_then_else(
                    odd(),
                    vec![mark(1), async_wait()],
                    vec![async_wait(), mark(2)],
                ),
            ],
        ),
        case(
            "async start before an If, wait after it",
            vec![
                start(),
                Node::if_then_else(odd(), vec![mark(1)], vec![mark(2)]),
                async_wait(),
            ],
        ),
        case(
            "async start in one branch, wait in a later If on the same condition",
            vec![
                Node::let_bind("c", odd()),
                Node::if_then(Expr::var("c"), vec![start()]),
                mark(3),
                Node::if_then(Expr::var("c"), vec![async_wait()]),
            ],
        ),
        case(
            "async starts of one tag in both branches (load or store), wait after the If",
            vec![
                Node::if_then_else(
                    bin(BinOp::Eq, gid(), Expr::u32(0)),
                    vec![async_copy(false, "a", "out", Expr::u32(21), Expr::u32(8))],
                    vec![start()],
                ),
                async_wait(),
            ],
        ),
        case(
            "async start before a Loop, wait after it",
            vec![
                start(),
                Node::loop_for(
                    "i",
                    Expr::u32(0),
                    Expr::u32(3),
                    vec![Node::store(
                        "out",
                        bin(BinOp::Add, gid(), Expr::u32(16)),
                        Expr::var("i"),
                    )],
                ),
                async_wait(),
            ],
        ),
        case(
            "async start in a one-trip Loop, wait after it",
            vec![
                Node::loop_for("i", Expr::u32(2), Expr::u32(3), vec![start()]),
                async_wait(),
            ],
        ),
        case(
            "async start before a Block, wait in it",
            vec![start(), Node::block(vec![mark(4), async_wait()])],
        ),
        case(
            "async tag reused after its wait, also inside a Loop",
            vec![
                async_copy(true, "a", "out", own(), Expr::u32(4)),
                async_wait(),
                Node::loop_for(
                    "i",
                    Expr::u32(0),
                    Expr::u32(2),
                    vec![
                        async_copy(
                            true,
                            "a",
                            "out",
                            bin(BinOp::Add, own(), Expr::u32(4)),
                            bin(BinOp::Add, Expr::var("i"), Expr::u32(3)),
                        ),
                        async_wait(),
                    ],
                ),
            ],
        ),
        case("async start without a wait", vec![start()]).failing(),
        case("async wait without a start", vec![async_wait()]).failing(),
        case(
            "async wait without a start on some invocations",
            vec![Node::if_then(odd(), vec![start()]), async_wait()],
        )
        .failing(),
        case(
            "async tag started twice",
            vec![start(), start(), async_wait()],
        )
        .failing(),
        case(
            "async start in a two-trip Loop, wait after it",
            vec![
                Node::loop_for("i", Expr::u32(0), Expr::u32(2), vec![start()]),
                async_wait(),
            ],
        )
        .failing(),
        case(
            "async Return between start and wait",
            vec![
                start(),
                Node::if_then(odd(), vec![Node::Return]),
                async_wait(),
            ],
        )
        .failing(),
    ]
}

/// Async copies whose source changes between start and wait: the bytes at the start win.
/// Only invocation 0 copies (`s` is one read-write buffer), so nothing races.
pub fn async_snapshot_cases() -> Vec<Case> {
    let (s, program, first) = (snapshot_source(), snapshot_program, in_first_invocation);
    let clobber = |at: u32| Node::store("s", Expr::u32(at), Expr::u32(0xdead_beef));
    let load = |size: Expr| async_copy(false, "s", "out", Expr::u32(6), size);
    vec![
        Case::new(
            "async source stored to between start and wait",
            program(
                false,
                vec![first(vec![load(Expr::u32(13)), clobber(2), async_wait()])],
            ),
            vec![s.clone()],
        ),
        Case::new(
            "async store source changed in an If and a Loop before the wait",
            program(
                false,
                vec![store_changed_in_an_if_and_a_loop(Expr::u32(20))],
            ),
            vec![s.clone()],
        ),
        Case::new(
            "async source changed by another invocation between barriers",
            program(
                false,
                vec![
                    first(vec![load(Expr::u32(16))]),
                    Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                    Node::if_then(bin(BinOp::Eq, gid(), Expr::u32(1)), vec![clobber(3)]),
                    Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                    first(vec![async_wait()]),
                ],
            ),
            vec![s.clone()],
        ),
        Case::new(
            "async copy of a run-time size into a workgroup buffer, source changed",
            program(
                true,
                vec![
                    first(vec![
                        async_copy(
                            false,
                            "s",
                            "tile",
                            Expr::u32(2),
                            bin(
                                BinOp::Sub,
                                Expr::load("s", Expr::u32(7)),
                                Expr::u32(0x8888_8870),
                            ),
                        ),
                        clobber(1),
                        async_wait(),
                    ]),
                    Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                    Node::store("out", gid(), Expr::load("tile", gid())),
                ],
            ),
            vec![s],
        ),
    ]
}

/// The source of the async snapshot cases: eight words `0x11111111 * (i + 1)`.
fn snapshot_source() -> Vec<u8> {
    u32_bytes(&(0..8).map(|i| 0x1111_1111 * (i + 1)).collect::<Vec<_>>())
}

/// Four invocations over `s` (read-write, eight words), `out` (eight words) and, if
/// `shared`, a workgroup `tile` of four words.
fn snapshot_program(shared: bool, body: Vec<Node>) -> Program {
    let mut buffers = vec![
        BufferDecl::read_write("s", 0, DataType::U32).with_count(8),
        BufferDecl::output("out", 1, DataType::U32).with_count(8),
    ];
    if shared {
        buffers.push(BufferDecl::workgroup("tile", 4, DataType::U32));
    }
    Program::wrapped(buffers, [4, 1, 1], body)
}

/// Invocation 0 starts an `AsyncStore` of `size` bytes of `s` to `out` at byte 3, then
/// changes `s` in an `If` and a `Loop`, then waits.
fn store_changed_in_an_if_and_a_loop(size: Expr) -> Node {
    in_first_invocation(vec![
        async_copy(true, "s", "out", Expr::u32(3), size),
        Node::if_then(
            bin(
                BinOp::Eq,
                Expr::load("s", Expr::u32(0)),
                Expr::u32(0x1111_1111),
            ),
            vec![Node::store("s", Expr::u32(0), Expr::u32(0xdead_beef))],
        ),
        Node::loop_for(
            "i",
            Expr::u32(1),
            Expr::u32(4),
            vec![Node::store("s", Expr::var("i"), Expr::var("i"))],
        ),
        async_wait(),
    ])
}

/// `body` run by invocation 0 alone.
fn in_first_invocation(body: Vec<Node>) -> Node {
    Node::if_then(bin(BinOp::Eq, gid(), Expr::u32(0)), body)
}

/// Async copies whose source changes before the wait and whose payload has no static
/// size of at most 4096 bytes: each invocation keeps it in a device-heap block from the
/// start to the wait (`lower::async_copy`). Appended last (earlier cases keep their
/// indices).
pub fn async_heap_snapshot_cases() -> Vec<Case> {
    let (s, first) = (snapshot_source(), in_first_invocation);
    let program = |body| snapshot_program(false, body);
    let clobber = |at: Expr| Node::store("s", at, Expr::u32(0xdead_beef));
    // `s[7] - 0x8888_8870`: 24 at run time.
    let twenty_four = || {
        bin(
            BinOp::Sub,
            Expr::load("s", Expr::u32(7)),
            Expr::u32(0x8888_8870),
        )
    };
    let case = |name: &str, body: Vec<Node>| {
        Case::new(
            format!("heap snapshot: {name}"),
            program(body),
            vec![s.clone()],
        )
    };
    vec![
        case(
            "source stored to between start and wait",
            vec![first(vec![
                async_copy(false, "s", "out", Expr::u32(6), twenty_four()),
                clobber(Expr::u32(2)),
                async_wait(),
            ])],
        ),
        case(
            "store source changed in an If and a Loop",
            vec![store_changed_in_an_if_and_a_loop(Expr::u32(5000))],
        ),
        // A block taken and given back each iteration.
        case(
            "a transfer per loop iteration",
            vec![first(vec![Node::loop_for(
                "i",
                Expr::u32(0),
                Expr::u32(3),
                vec![
                    async_copy(
                        true,
                        "s",
                        "out",
                        bin(BinOp::Mul, Expr::var("i"), Expr::u32(4)),
                        bin(BinOp::Add, Expr::var("i"), Expr::u32(6)),
                    ),
                    clobber(Expr::var("i")),
                    async_wait(),
                ],
            )])],
        ),
        // Every invocation copies `s[0..2]` to its own eight bytes of `out` and writes a
        // word of `s` outside that range: no two invocations race.
        case(
            "every invocation at once",
            vec![
                async_copy(
                    true,
                    "s",
                    "out",
                    bin(BinOp::Mul, gid(), Expr::u32(8)),
                    bin(
                        BinOp::Min,
                        bin(BinOp::Add, gid(), Expr::u32(8)),
                        Expr::u32(8),
                    ),
                ),
                clobber(bin(BinOp::Add, gid(), Expr::u32(4))),
                async_wait(),
            ],
        ),
        // A lane that returns with its transfer pending fails the dispatch (and gives its
        // block back: the cases after this one run on the same device heap).
        case(
            "returned with the transfer pending",
            vec![
                async_copy(false, "s", "out", Expr::u32(0), twenty_four()),
                clobber(Expr::u32(5)),
                Node::if_then(bin(BinOp::Eq, gid(), Expr::u32(2)), vec![Node::Return]),
                async_wait(),
            ],
        )
        .failing(),
    ]
}

/// A `Let` or `Assign` of a load from a bytes buffer the program writes, read after the
/// buffer may have changed: the variable holds the bytes as they were at the binding, in a
/// device-heap block (`lower::bytes`). Appended last.
pub fn bytes_snapshot_cases() -> Vec<Case> {
    let io: Vec<u8> = (1..=8).map(|i| i * 0x11).collect();
    let a: Vec<u8> = (1..=8).map(|i| 0xa0 + i).collect();
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
    let first = in_first_invocation;
    let store_io = |at: Expr, value: u32| Node::store("io", at, Expr::u32(value));
    let case = |name: &str, body: Vec<Node>| {
        Case::new(
            format!("bytes snapshot: {name}"),
            program(body),
            vec![io.clone(), vec![0; 16], a.clone()],
        )
    };
    vec![
        case(
            "Let, store into its bytes, read",
            vec![first(vec![
                Node::let_bind("rest", Expr::load("io", Expr::u32(3))),
                store_io(Expr::u32(2), 0xdead_beef),
                Node::store("out", Expr::u32(0), Expr::var("rest")),
                Node::store("out", Expr::u32(1), Expr::load("io", Expr::u32(3))),
            ])],
        ),
        case(
            "Assign, store, read",
            vec![first(vec![
                Node::let_bind("rest", Expr::load("a", Expr::u32(1))),
                Node::assign("rest", Expr::load("io", Expr::u32(1))),
                store_io(Expr::u32(0), 0x0102_0304),
                Node::store("out", Expr::u32(0), Expr::var("rest")),
            ])],
        ),
        // A block per iteration, each kept on the lane's list until it leaves.
        case(
            "a Let per loop iteration",
            vec![first(vec![Node::loop_for(
                "i",
                Expr::u32(0),
                Expr::u32(4),
                vec![
                    Node::let_bind("rest", Expr::load("io", Expr::var("i"))),
                    store_io(Expr::var("i"), 0x7777_7777),
                    Node::store("out", Expr::var("i"), Expr::var("rest")),
                ],
            )])],
        ),
        // Every invocation binds before the barrier; one stores after it.
        case(
            "another invocation stores after a barrier",
            vec![
                Node::let_bind("rest", Expr::load("io", Expr::u32(4))),
                Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                Node::if_then(
                    bin(BinOp::Eq, gid(), Expr::u32(1)),
                    vec![store_io(Expr::u32(4), 0xaaaa_aaaa)],
                ),
                Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                Node::store("out", gid(), Expr::var("rest")),
            ],
        ),
        // The lane leaves by `Return` with its blocks (given back there).
        case(
            "a lane returns holding a snapshot",
            vec![
                first(vec![
                    Node::let_bind("rest", Expr::load("io", Expr::u32(5))),
                    store_io(Expr::u32(4), 0x0505_0505),
                    Node::store("out", Expr::u32(0), Expr::var("rest")),
                    Node::Return,
                ]),
                Node::store("out", gid(), Expr::u32(9)),
            ],
        ),
    ]
}

/// Run-time errors the reference raises; the GPU must fail too.
pub fn fault_cases() -> Vec<Case> {
    let a = u32_bytes(&[10, 20, 30, 40]);
    let zero_at_2 = u32_bytes(&[1, 2, 0, 4]);
    let div = elementwise(
        &[("a", DataType::I32), ("b", DataType::I32)],
        DataType::I32,
        4,
        bin(BinOp::Div, ld("a"), ld("b")),
    );
    let rem = elementwise(
        &[("a", DataType::I32), ("b", DataType::I32)],
        DataType::I32,
        4,
        bin(BinOp::Mod, ld("a"), ld("b")),
    );
    let overflow = elementwise(
        &[("a", DataType::I32), ("b", DataType::I32)],
        DataType::I32,
        1,
        bin(BinOp::Div, ld("a"), ld("b")),
    );
    let negative_index = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::I32).with_count(4),
            BufferDecl::output("out", 1, DataType::U32).with_count(4),
        ],
        [4, 1, 1],
        vec![Node::store("out", ld("a"), Expr::u32(1))],
    );
    let trap = Program::wrapped(
        vec![BufferDecl::output("out", 0, DataType::U32).with_count(4)],
        [4, 1, 1],
        vec![
            Node::store("out", gid(), Expr::u32(1)),
            Node::if_then(
                bin(BinOp::Eq, gid(), Expr::u32(2)),
                vec![Node::Trap {
                    address: Box::new(Expr::u32(5)),
                    tag: "t".into(),
                }],
            ),
        ],
    );
    let divergent_barrier = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(32),
            BufferDecl::output("out", 1, DataType::U32).with_count(32),
        ],
        [32, 1, 1],
        vec![Node::if_then(
            bin(
                BinOp::Eq,
                bin(BinOp::BitAnd, ld("a"), Expr::u32(1)),
                Expr::u32(1),
            ),
            vec![
                Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                Node::store("out", gid(), Expr::u32(1)),
            ],
        )],
    );
    vec![
        Case::new("trap", trap, vec![]).failing(),
        Case::new(
            "barrier in a branch that diverges at run time",
            divergent_barrier,
            vec![u32_bytes(&(0..32).collect::<Vec<_>>())],
        )
        .failing(),
        Case::new(
            "i32 division by zero",
            div,
            vec![a.clone(), zero_at_2.clone()],
        )
        .failing(),
        Case::new("i32 remainder by zero", rem, vec![a, zero_at_2]).failing(),
        Case::new(
            "i32 MIN / -1",
            overflow,
            vec![u32_bytes(&[i32::MIN as u32]), u32_bytes(&[u32::MAX])],
        )
        .failing(),
        Case::new(
            "negative store index",
            negative_index,
            vec![u32_bytes(&[0, 1, (-2i32) as u32, 3])],
        )
        .failing(),
    ]
}

/// Every hand-written case.
pub fn all_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(u32_binops());
    cases.extend(i32_binops());
    cases.extend(f32_binops());
    cases.extend(unops());
    cases.extend(casts());
    cases.extend(control_and_memory());
    cases.extend(workgroup_cases());
    cases.extend(subgroup_cases());
    cases.extend(wide_and_raw_type_cases());
    cases.extend(async_copy_cases());
    cases.extend(fault_cases());
    cases.extend(bytes_cases());
    // Last: the cases before keep their indices (and PTX snapshot names).
    cases.extend(super::half_programs::half_cases());
    cases.extend(replicated_cases());
    cases.extend(literal_divisor_cases());
    cases.extend(super::subgroup_programs::subgroup_return_cases());
    cases.extend(barrier_branch_history_cases());
    cases.extend(extension_cases());
    cases.extend(async_split_cases());
    cases.extend(async_snapshot_cases());
    cases.extend(bytes_view_cases());
    cases.extend(super::subgroup_programs::constant_operand_cases());
    cases.extend(minmax_of_negation_cases());
    cases.extend(super::step_programs::step_machine_cases());
    cases.extend(raw_alias_element_cases());
    cases.extend(raw_operand_cases());
    cases.extend(four_bit_element_cases());
    cases.extend(raw_vector_and_unaddressed_element_cases());
    cases.extend(bytes_subgroup_operand_cases());
    cases.extend(super::step_programs::bytes_operand_round_cases());
    cases.extend(bytes_read_before_write_cases());
    cases.extend(super::loop_programs::hoisted_bounds_cases());
    cases.extend(super::vector_programs::maybe_empty_vector_cases());
    cases.extend(super::vector_programs::nibble_vector_cases());
    cases.extend(zero_bound_of_mask_cases());
    cases.extend(super::step_programs::divergent_barrier_cases());
    cases.extend(async_heap_snapshot_cases());
    cases.extend(bytes_snapshot_cases());
    cases.extend(super::step_programs::nested_operand_cases());
    cases.extend(super::step_programs::constant_branch_after_subgroup_cases());
    cases.extend(super::wide_programs::wide_element_cases());
    cases.extend(super::step_programs::finishing_lane_barrier_cases());
    cases.extend(super::speculation_programs::speculated_branch_cases());
    cases.extend(super::typed_lane_programs::typed_lane_cases());
    cases
}

/// Buffers of 8-bit floats and of quantized elements stored as raw integers: the reference
/// loads, stores and counts them exactly as `u8`/`u16` buffers (raw bytes, zero out of
/// bounds, the value's low bytes stored), ignoring the format and the scale.
pub fn raw_alias_element_cases() -> Vec<Case> {
    use vyre_spec::{QuantizationScale, QuantizationZeroPoint};
    let quantized = |storage: DataType| DataType::Quantized {
        storage: Box::new(storage),
        scale: QuantizationScale::PerTensor,
        zero_point: QuantizationZeroPoint::Absent,
    };
    let bytes: Vec<u8> = (0..N)
        .map(|i| (i as u8).wrapping_mul(91).wrapping_add(3))
        .collect();
    let handle = DataType::Handle(vyre_spec::TypeId(0x4A));
    let past_half = || Expr::load("a", bin(BinOp::Add, gid(), Expr::u32(N / 2)));
    // vyre's validator keeps these values in their own type: loads, stores, Lets, Selects.
    let copy_through_let = |ty: DataType, n: u32| {
        let past = Expr::load("a", bin(BinOp::Add, gid(), Expr::u32(n / 2)));
        let body = vec![
            Node::let_bind("v", past),
            Node::if_then(
                bin(BinOp::Lt, gid(), Expr::u32(n)),
                vec![Node::store("out", gid(), Expr::var("v"))],
            ),
        ];
        Program::wrapped(
            elementwise_buffers(&[("a", ty.clone())], ty, n),
            [64, 1, 1],
            body,
        )
    };
    vec![
        Case::new(
            "f8e4m3 load stored into an f8e4m3 buffer is its raw byte",
            elementwise(&[("a", DataType::F8E4M3)], DataType::F8E4M3, N, ld("a")),
            vec![bytes.clone()],
        ),
        Case::new(
            "f8e5m2 load past the end is a zero byte",
            elementwise(&[("a", DataType::F8E5M2)], DataType::F8E5M2, N, past_half()),
            vec![bytes.clone()],
        ),
        Case::new(
            "f8e4m3 select between an in-bounds and a past-the-end load",
            elementwise(
                &[("a", DataType::F8E4M3)],
                DataType::F8E4M3,
                N,
                Expr::select(
                    bin(
                        BinOp::Lt,
                        bin(BinOp::BitAnd, gid(), Expr::u32(3)),
                        Expr::u32(2),
                    ),
                    ld("a"),
                    past_half(),
                ),
            ),
            vec![bytes.clone()],
        ),
        Case::new(
            "f8e5m2 buffer length counts its bytes",
            elementwise(
                &[("a", DataType::F8E5M2)],
                DataType::U32,
                N,
                bin(BinOp::Add, Expr::buf_len("a"), gid()),
            ),
            vec![[bytes.as_slice(), &[1, 2, 3, 4, 5, 6, 7]].concat()],
        ),
        Case::new(
            "quantized u8 storage loads raw bytes, zero past the end",
            elementwise(
                &[("a", quantized(DataType::U8))],
                quantized(DataType::U8),
                N,
                past_half(),
            ),
            vec![bytes.clone()],
        ),
        Case::new(
            "quantized f8e5m2 storage copied through a Let",
            copy_through_let(quantized(DataType::F8E5M2), N),
            vec![bytes.clone()],
        ),
        Case::new(
            "quantized i16 storage copied through a Let, two raw bytes an element",
            copy_through_let(quantized(DataType::I16), N / 2),
            vec![bytes.clone()],
        ),
        Case::new(
            "handle buffer copied through a Let, four raw bytes an element",
            copy_through_let(handle.clone(), N / 4),
            vec![bytes.clone()],
        ),
        Case::new(
            "handle select between an in-bounds and a past-the-end load",
            elementwise(
                &[("a", handle.clone())],
                handle.clone(),
                N / 4,
                Expr::select(
                    bin(
                        BinOp::Eq,
                        bin(BinOp::BitAnd, gid(), Expr::u32(1)),
                        Expr::u32(0),
                    ),
                    ld("a"),
                    Expr::load("a", bin(BinOp::Add, gid(), Expr::u32(N / 8))),
                ),
            ),
            vec![bytes.clone()],
        ),
        // Handles are raw bytes to the reference's operators: comparing two fails the
        // dispatch where it runs.
        Case::new(
            "handle comparison is a run-time error",
            elementwise(
                &[("a", handle.clone())],
                DataType::U32,
                N / 4,
                Expr::select(bin(BinOp::Eq, ld("a"), ld("a")), Expr::u32(1), Expr::u32(2)),
            ),
            vec![bytes.clone()],
        )
        .failing(),
    ]
}

/// 4-bit elements (`I4`, `FP4`, `NF4`, quantized with 4-bit storage): the reference loads
/// and stores them one byte apart as raw bytes, like `u8`, but counts two elements a byte in
/// `BufLen`, in the grid it sizes from buffer lengths and in the bytes it allocates for a
/// declared count (outputs and workgroup buffers hold `ceil(count / 2)` bytes).
pub fn four_bit_element_cases() -> Vec<Case> {
    use vyre_spec::{QuantizationScale, QuantizationZeroPoint};
    let quantized = |storage: DataType| DataType::Quantized {
        storage: Box::new(storage),
        scale: QuantizationScale::PerGroup { group_size: 32 },
        zero_point: QuantizationZeroPoint::PerGroup { group_size: 32 },
    };
    let bytes: Vec<u8> = (0..N)
        .map(|i| (i as u8).wrapping_mul(57).wrapping_add(11))
        .collect();
    let lid = Expr::LocalId { axis: 0 };
    let through_workgroup = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::I4).with_count(N),
            BufferDecl::output("out", 1, DataType::I4).with_count(N),
            BufferDecl::read_write("len", 2, DataType::U32).with_count(N),
            BufferDecl::workgroup("tile", 64, DataType::I4),
        ],
        [64, 1, 1],
        vec![
            Node::store("tile", lid.clone(), ld("a")),
            Node::barrier_with_ordering(MemoryOrdering::SeqCst),
            Node::store(
                "out",
                gid(),
                Expr::load("tile", bin(BinOp::BitXor, lid.clone(), Expr::u32(1))),
            ),
            Node::store(
                "len",
                gid(),
                bin(BinOp::Add, Expr::buf_len("tile"), Expr::buf_len("out")),
            ),
        ],
    );
    vec![
        // The output of N elements holds N / 2 bytes: stores past them are dropped.
        Case::new(
            "i4 load stored into an i4 output, one byte an element",
            elementwise(&[("a", DataType::I4)], DataType::I4, N, ld("a")),
            vec![bytes.clone()],
        ),
        Case::new(
            "nf4 buffer length counts two elements a byte",
            elementwise(
                &[("a", DataType::NF4)],
                DataType::U32,
                N,
                bin(BinOp::Add, Expr::buf_len("a"), gid()),
            ),
            vec![[bytes.as_slice(), &[1, 2, 3]].concat()],
        ),
        Case::new(
            "quantized i4 storage loads raw bytes, zero past the end",
            elementwise(
                &[("a", quantized(DataType::I4))],
                quantized(DataType::I4),
                N,
                Expr::load("a", bin(BinOp::Add, gid(), Expr::u32(N / 2))),
            ),
            vec![bytes.clone()],
        ),
        Case::new(
            "fp4 output of N elements sizes the grid by its element count",
            elementwise(&[("a", DataType::FP4)], DataType::FP4, N / 2, ld("a")),
            vec![bytes[..(N / 2) as usize].to_vec()],
        ),
        Case::new(
            "i4 workgroup buffer holds 32 bytes for 64 elements",
            through_workgroup,
            vec![bytes.clone(), vec![0; (N * 4) as usize]],
        ),
    ]
}

/// Vectors of fixed-width lanes load and store as raw bytes of their whole width (a
/// `Vec<u8; 4>` as a handle, a `Vec<u16; 4>` as an i64), never as lanes of numbers.
/// `DeviceMesh` and `Array` elements, and vectors of them, have a zero stride in the
/// reference: every load is a zero value of their size, every store writes nothing, and
/// `BufLen` counts them by their size.
pub fn raw_vector_and_unaddressed_element_cases() -> Vec<Case> {
    let vec_of = |element: DataType, count: u8| DataType::Vec {
        element: Box::new(element),
        count,
    };
    let mesh = DataType::DeviceMesh {
        axes: [2u32, 4].into_iter().collect(),
    };
    let array = DataType::Array { element_size: 2 };
    let bytes: Vec<u8> = (0..N * 4)
        .map(|i| (i as u8).wrapping_mul(73).wrapping_add(5))
        .collect();
    // `w[gid] = v` where `v` reads `a` (of the same type: vyre's validator keeps these
    // values in their type), never `w` (other invocations write it): `w`'s stores show in
    // the result; `out` takes a count from `BufLen`.
    let in_place = |ty: DataType, n: u32, value: Expr| {
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, ty.clone()).with_count(n),
                BufferDecl::read_write("w", 1, ty.clone()).with_count(n),
                BufferDecl::output("out", 2, DataType::U32).with_count(n),
            ],
            [64, 1, 1],
            vec![
                Node::let_bind("v", value),
                Node::if_then(
                    bin(BinOp::Lt, gid(), Expr::u32(n)),
                    vec![
                        Node::store("w", gid(), Expr::var("v")),
                        Node::store(
                            "out",
                            gid(),
                            bin(
                                BinOp::Add,
                                bin(BinOp::Mul, Expr::buf_len("w"), Expr::u32(1000)),
                                Expr::buf_len("a"),
                            ),
                        ),
                    ],
                ),
            ],
        )
    };
    let shifted = |by: u32| Expr::load("a", bin(BinOp::Add, gid(), Expr::u32(by)));
    // An input of whole `stride`-byte elements (vyre-cuda refuses a trailing partial one).
    let whole = |stride: usize| bytes[..bytes.len() / stride * stride].to_vec();
    let select_near_or_far = |n: u32| {
        Expr::select(
            bin(
                BinOp::Eq,
                bin(BinOp::BitAnd, gid(), Expr::u32(1)),
                Expr::u32(0),
            ),
            shifted(1),
            shifted(n - 4),
        )
    };
    vec![
        Case::new(
            "vec of four u8 lanes moves four raw bytes an element, zero past the end",
            in_place(vec_of(DataType::U8, 4), N / 2, select_near_or_far(N / 2)),
            vec![bytes.clone(), bytes[..(N * 2) as usize].to_vec()],
        ),
        Case::new(
            "vec of two f16 lanes is four raw bytes, not floats",
            in_place(vec_of(DataType::F16, 2), N / 2, shifted(3)),
            vec![bytes.clone(), bytes[..(N * 2) as usize].to_vec()],
        ),
        Case::new(
            "vec of four u16 lanes moves eight raw bytes an element",
            in_place(vec_of(DataType::U16, 4), N / 4, select_near_or_far(N / 4)),
            vec![bytes.clone(), bytes[..(N * 2) as usize].to_vec()],
        ),
        Case::new(
            "vec of two vec4<u32>-sized lanes of u8 moves sixteen raw bytes",
            in_place(
                vec_of(vec_of(DataType::U8, 8), 2),
                N / 8,
                select_near_or_far(N / 8),
            ),
            vec![bytes.clone(), bytes[..(N * 2) as usize].to_vec()],
        ),
        Case::new(
            "device-mesh loads are zero and stores write nothing",
            in_place(mesh.clone(), N / 2, shifted(1)),
            vec![bytes.clone(), bytes[..(N * 2) as usize].to_vec()],
        ),
        Case::new(
            "two-byte array elements load as zero and store nothing",
            in_place(array.clone(), N, select_near_or_far(N)),
            vec![bytes.clone(), bytes[..(N * 2) as usize].to_vec()],
        ),
        Case::new(
            "zero-size array elements load the empty bytes and count their buffer's bytes",
            in_place(DataType::Array { element_size: 0 }, N / 2, shifted(1)),
            vec![bytes.clone(), bytes[..(N * 2) as usize].to_vec()],
        ),
        Case::new(
            "twelve-byte array elements load twelve zero bytes",
            in_place(DataType::Array { element_size: 12 }, N / 4, shifted(1)),
            vec![whole(12), bytes[..(N / 4 * 12) as usize].to_vec()],
        ),
        Case::new(
            "vec of bytes lanes loads the empty bytes and counts by its size",
            in_place(vec_of(DataType::Bytes, 2), N / 2, shifted(1)),
            vec![bytes.clone(), bytes[..N as usize].to_vec()],
        ),
        Case::new(
            "vec of device meshes loads as eight zero bytes",
            in_place(vec_of(mesh.clone(), 2), N / 4, shifted(2)),
            vec![bytes.clone(), bytes[..(N * 2) as usize].to_vec()],
        ),
        // Widths without a raw type (3, 5 to 7, 9 to 15 bytes), moved byte by byte.
        Case::new(
            "vec of three u8 lanes (an RGB pixel) moves three raw bytes, zero past the end",
            in_place(vec_of(DataType::U8, 3), N / 2, select_near_or_far(N / 2)),
            vec![whole(3), bytes[..(N / 2 * 3) as usize].to_vec()],
        ),
        Case::new(
            "vec of five i8 lanes moves five raw bytes an element, zero past the end",
            in_place(vec_of(DataType::I8, 5), N / 4, select_near_or_far(N / 4)),
            vec![whole(5), bytes[..(N / 4 * 5) as usize].to_vec()],
        ),
        Case::new(
            "vec of three f16 lanes is six raw bytes, not floats",
            in_place(vec_of(DataType::F16, 3), N / 4, shifted(3)),
            vec![whole(6), bytes[..(N / 4 * 6) as usize].to_vec()],
        ),
        Case::new(
            "vec of seven u8 lanes moves seven raw bytes an element, zero past the end",
            in_place(vec_of(DataType::U8, 7), N / 8, select_near_or_far(N / 8)),
            vec![whole(7), bytes[..(N / 8 * 7) as usize].to_vec()],
        ),
        Case::new(
            "vec of twelve u8 lanes moves twelve raw bytes an element, zero past the end",
            in_place(vec_of(DataType::U8, 12), N / 4, select_near_or_far(N / 4)),
            vec![whole(12), bytes[..(N / 4 * 12) as usize].to_vec()],
        ),
        Case::new(
            "vec of seven bf16 lanes is fourteen raw bytes, not floats",
            in_place(vec_of(DataType::BF16, 7), N / 8, shifted(2)),
            vec![whole(14), bytes[..(N / 8 * 14) as usize].to_vec()],
        ),
        Case::new(
            "a workgroup buffer of ten-byte elements, read back at a neighbour's index",
            odd_width_through_workgroup(vec_of(DataType::U16, 5)),
            vec![bytes
                .iter()
                .cycle()
                .take((N * 10) as usize)
                .copied()
                .collect()],
        ),
        Case::new(
            "a workgroup buffer of five-byte elements, read back at a neighbour's index",
            odd_width_through_workgroup(vec_of(DataType::U8, 5)),
            vec![bytes
                .iter()
                .cycle()
                .take((N * 5) as usize)
                .copied()
                .collect()],
        ),
        Case::new(
            "inputs ending in a partial element: BufLen counts whole ones, the tail is kept",
            partial_element_inputs(),
            vec![
                whole(4)
                    .iter()
                    .chain(&[0xa1, 0xb2, 0xc3])
                    .copied()
                    .collect(),
                bytes[..18].to_vec(),
            ],
        ),
        // Raw values to the reference's operators: comparing two fails where it runs.
        Case::new(
            "device-mesh comparison is a run-time error",
            in_place(
                mesh,
                N / 2,
                Expr::select(
                    bin(BinOp::Eq, shifted(0), shifted(0)),
                    shifted(1),
                    shifted(2),
                ),
            ),
            vec![bytes.clone(), bytes[..(N * 2) as usize].to_vec()],
        )
        .failing(),
    ]
}

/// `out[gid] = a[gid + 1] + BufLen(a) + BufLen(w)` and `w[gid] *= 3`: the last `a` read
/// (the partial element) and the last `w` update are out of bounds.
fn partial_element_inputs() -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(N),
            BufferDecl::read_write("w", 1, DataType::U32).with_count(4),
            BufferDecl::output("out", 2, DataType::U32).with_count(N),
        ],
        [64, 1, 1],
        vec![
            Node::store(
                "out",
                gid(),
                bin(
                    BinOp::Add,
                    Expr::load("a", bin(BinOp::Add, gid(), Expr::u32(1))),
                    bin(BinOp::Add, Expr::buf_len("a"), Expr::buf_len("w")),
                ),
            ),
            Node::store(
                "w",
                gid(),
                bin(BinOp::Mul, Expr::load("w", gid()), Expr::u32(3)),
            ),
        ],
    )
}

/// `tile[lid] = a[gid]`, a barrier, `out[gid] = tile[lid ^ 3]` (in and past the tile).
fn odd_width_through_workgroup(element: DataType) -> Program {
    let lid = Expr::LocalId { axis: 0 };
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, element.clone()).with_count(N),
            BufferDecl::output("out", 1, element.clone()).with_count(N),
            BufferDecl::workgroup("tile", 62, element),
        ],
        [64, 1, 1],
        vec![
            Node::store("tile", lid.clone(), ld("a")),
            Node::barrier_with_ordering(MemoryOrdering::SeqCst),
            Node::store(
                "out",
                gid(),
                Expr::load("tile", bin(BinOp::BitXor, lid, Expr::u32(3))),
            ),
        ],
    )
}

/// Bytes loads as subgroup operands: a ballot takes each lane's `truthy()` of its view (more
/// than four bytes: true), a shuffle's lane its `try_as_u32` (more than four bytes: a
/// run-time error); a shuffled or reduced view is a run-time error where the operation
/// runs (the reference combines only u32 and float lanes), and nowhere else.
pub fn bytes_subgroup_operand_cases() -> Vec<Case> {
    let source = bytes_tail_source();
    let program = |body: Vec<Node>| {
        Program::wrapped(
            vec![
                bytes_in("b", 0, source.len() as u32),
                BufferDecl::output("out", 1, DataType::U32).with_count(64),
            ],
            [32, 1, 1],
            body,
        )
    };
    let view = |index: Expr| Expr::load("b", index);
    let store = |value: Expr| vec![Node::store("out", gid(), value)];
    let shuffle = |value: Expr, lane: Expr| Expr::SubgroupShuffle {
        value: Box::new(value),
        lane: Box::new(lane),
    };
    let reduce = |value: Expr| Expr::SubgroupReduce {
        op: vyre_foundation::ir::SubgroupReduceOp::Add,
        value: Box::new(value),
    };
    let short_lane = view(bin(
        BinOp::Add,
        Expr::u32(33),
        bin(
            BinOp::Mul,
            bin(BinOp::BitAnd, gid(), Expr::u32(1)),
            Expr::u32(3),
        ),
    ));
    let inputs = vec![source.clone()];
    vec![
        Case::new(
            "ballot of bytes loads takes each lane's truthiness of its view",
            program(store(Expr::SubgroupBallot {
                cond: Box::new(view(gid())),
            })),
            inputs.clone(),
        ),
        Case::new(
            "ballot of a bytes variable",
            program(vec![
                Node::let_bind("v", view(bin(BinOp::Add, gid(), Expr::u32(3)))),
                Node::store(
                    "out",
                    gid(),
                    Expr::SubgroupBallot {
                        cond: Box::new(Expr::var("v")),
                    },
                ),
            ]),
            inputs.clone(),
        ),
        Case::new(
            "shuffle lane read from a short bytes load",
            program(store(shuffle(
                bin(
                    BinOp::Add,
                    bin(BinOp::Mul, gid(), Expr::u32(3)),
                    Expr::u32(1),
                ),
                short_lane,
            ))),
            inputs.clone(),
        ),
        Case::new(
            "shuffle lane read from a long bytes load is a run-time error",
            program(store(shuffle(gid(), view(gid())))),
            inputs.clone(),
        )
        .failing(),
        Case::new(
            "subgroup sum of bytes loads is a run-time error",
            program(store(reduce(view(gid())))),
            inputs.clone(),
        )
        .failing(),
        Case::new(
            "shuffle of a bytes load is a run-time error",
            program(store(shuffle(view(gid()), Expr::u32(0)))),
            inputs.clone(),
        )
        .failing(),
        Case::new(
            "subgroup sum of bytes loads behind a branch no invocation takes runs",
            program(vec![Node::if_then_else(
                bin(BinOp::Gt, Expr::buf_len("b"), Expr::u32(1000)),
                store(reduce(view(gid()))),
                store(Expr::u32(7)),
            )]),
            inputs,
        ),
    ]
}

/// Operators on raw values (loads of u8/i64/handle elements, `Value::Bytes` in the
/// reference) fail the dispatch where they run and only there: behind a branch no
/// invocation takes the program runs; taken by some invocations, it fails.
pub fn raw_operand_cases() -> Vec<Case> {
    let bytes: Vec<u8> = (0..N * 8).map(|i| (i as u8).wrapping_mul(29)).collect();
    let raw_op = |ty: DataType, op: BinOp, from: u32| {
        let value = bin(op, ld("a"), ld("a"));
        let value = match op {
            BinOp::Eq | BinOp::Lt => Expr::select(value, Expr::u32(1), Expr::u32(2)),
            _ => cast(DataType::U32, value),
        };
        let body = vec![Node::if_then(
            bin(BinOp::Lt, gid(), Expr::u32(N)),
            vec![
                Node::store("out", gid(), Expr::u32(7)),
                Node::if_then(
                    bin(BinOp::Ge, gid(), Expr::u32(from)),
                    vec![Node::store("out", gid(), value)],
                ),
            ],
        )];
        Program::wrapped(
            elementwise_buffers(&[("a", ty)], DataType::U32, N),
            [64, 1, 1],
            body,
        )
    };
    let mut cases = Vec::new();
    for (name, ty, op) in [
        ("u8 add", DataType::U8, BinOp::Add),
        ("i64 less-than", DataType::I64, BinOp::Lt),
        ("f8e4m3 equality", DataType::F8E4M3, BinOp::Eq),
    ] {
        cases.push(Case::new(
            format!("{name} behind a branch no invocation takes runs"),
            raw_op(ty.clone(), op, u32::MAX),
            vec![bytes.clone()],
        ));
        cases.push(
            Case::new(
                format!("{name} reached by some invocations fails"),
                raw_op(ty, op, N - 3),
                vec![bytes.clone()],
            )
            .failing(),
        );
    }
    // A cast to a type whose values are raw bytes (8-bit floats, 4-bit types, handles,
    // raw vectors) keeps the value's own bytes: the reference's catch-all.
    let vec_u8 = |count: u8| DataType::Vec {
        element: Box::new(DataType::U8),
        count,
    };
    for ty in [
        DataType::F8E4M3,
        DataType::F8E5M2,
        DataType::NF4,
        DataType::Handle(vyre_spec::TypeId(7)),
        vec_u8(3),
        vec_u8(4),
        DataType::F16,
        DataType::BF16,
    ] {
        cases.push(Case::new(
            format!("{ty} load cast to {ty} keeps its value"),
            elementwise(&[("a", ty.clone())], ty.clone(), N, cast(ty, ld("a"))),
            vec![bytes.clone()],
        ));
    }
    // A u64 cast reads up to eight raw bytes as a little-endian prefix (`try_as_u64`).
    for ty in [DataType::U8, DataType::I16, DataType::U16, DataType::I64] {
        cases.push(Case::new(
            format!("u64 cast of a {ty} load reads its bytes as a little-endian prefix"),
            elementwise(&[("a", ty)], DataType::U64, N, cast(DataType::U64, ld("a"))),
            vec![bytes.clone()],
        ));
    }
    cases
}

/// i32 `Max(a, Max(b, -x))` and `Min(a, Min(b, -x))`: ptxas fused such chains into one
/// three-input instruction that dropped the negation (fuzz seed 0x869f8bf45ed27dda).
pub fn minmax_of_negation_cases() -> Vec<Case> {
    let mut rng = Rng::new(17);
    let inputs = vec![
        u32_bytes(&edge_i32(&mut rng, N)),
        u32_bytes(&edge_i32(&mut rng, N)),
        u32_bytes(&edge_i32(&mut rng, N)),
    ];
    let buffers = [
        ("a", DataType::I32),
        ("b", DataType::I32),
        ("x", DataType::I32),
    ];
    let negated = || bin(BinOp::Sub, Expr::i32(0), ld("x"));
    [BinOp::Max, BinOp::Min]
        .into_iter()
        .map(|op| {
            let value = bin(op, ld("a"), bin(op, ld("b"), negated()));
            Case::new(
                format!("i32 {op:?} of {op:?} of a negation"),
                elementwise(&buffers, DataType::I32, N, value),
                inputs.clone(),
            )
        })
        .collect()
}

/// Unsigned order comparisons of a literal zero with a value that is 0 or all ones (`-b`,
/// `b * 0xFFFFFFFF`, `select(c, 0xFFFFFFFF, 0)` of a condition `b`): tautologies that ptxas
/// 13.0 (sm_90) folded as signed comparisons (`0 > -1` true), seen in the SASS of fuzz seed
/// 0xe65391424bfe6cd3's kernel and of minimal kernels. Half the lanes hold `b` = 1.
pub fn zero_bound_of_mask_cases() -> Vec<Case> {
    let inputs = vec![u32_bytes(
        &(0..N).map(|i| i % 2 * 5 + i / 2).collect::<Vec<_>>(),
    )];
    let cond = || bin(BinOp::Ne, ld("a"), Expr::u32(5));
    let b = || cast(DataType::U32, cond());
    let neg = || Expr::UnOp {
        op: UnOp::Negate,
        operand: Box::new(b()),
    };
    let times_all_ones = || bin(BinOp::Mul, b(), Expr::u32(u32::MAX));
    let mask = || Expr::select(cond(), Expr::u32(u32::MAX), Expr::u32(0));
    let zero = || Expr::u32(0);
    let compares = [
        ("0 > -b", bin(BinOp::Gt, zero(), neg())),
        (
            "0 > b * 0xFFFFFFFF",
            bin(BinOp::Gt, zero(), times_all_ones()),
        ),
        (
            "0 > select(c, 0xFFFFFFFF, 0)",
            bin(BinOp::Gt, zero(), mask()),
        ),
        (
            "b * 0xFFFFFFFF >= 0",
            bin(BinOp::Ge, times_all_ones(), zero()),
        ),
        (
            "select(c, 0xFFFFFFFF, 0) < 0",
            bin(BinOp::Lt, mask(), zero()),
        ),
        ("0 <= -b", bin(BinOp::Le, zero(), neg())),
    ];
    let mut cases: Vec<Case> = compares
        .into_iter()
        .map(|(name, compare)| {
            let value = Expr::select(compare, Expr::u32(1), Expr::u32(2));
            Case::new(
                format!("unsigned {name} of a condition b is a tautology"),
                elementwise(&[("a", DataType::U32)], DataType::U32, N, value),
                inputs.clone(),
            )
        })
        .collect();
    // The zero through a variable: `let z = 0u; out = select(z > b * 0xFFFFFFFF, 1, 2)`.
    let through_variable = Program::wrapped(
        elementwise_buffers(&[("a", DataType::U32)], DataType::U32, N),
        [64, 1, 1],
        vec![
            Node::let_bind("z", zero()),
            Node::store(
                "out",
                gid(),
                Expr::select(
                    bin(BinOp::Gt, Expr::var("z"), times_all_ones()),
                    Expr::u32(1),
                    Expr::u32(2),
                ),
            ),
        ],
    );
    cases.push(Case::new(
        "unsigned z > b * 0xFFFFFFFF with z bound to 0 is a tautology",
        through_variable,
        inputs,
    ));
    cases
}

/// IR extensions no evaluator knows fail the dispatch where a lane reaches them, and
/// only there.
pub fn extension_cases() -> Vec<Case> {
    use super::extensions::{unknown_expr, unknown_node};
    let n = 64;
    let program = |body: Vec<Node>| {
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::U32).with_count(n),
                BufferDecl::output("out", 1, DataType::U32).with_count(n),
            ],
            [n, 1, 1],
            body,
        )
    };
    let store = |value: Expr| Node::store("out", gid(), value);
    let when = |limit: u32, body: Vec<Node>| {
        let reached = bin(BinOp::Lt, Expr::load("a", gid()), Expr::u32(limit));
        vec![Node::if_then(reached, body), store(Expr::load("a", gid()))]
    };
    let as_u32 = |ty: DataType| Expr::cast(DataType::U32, unknown_expr(ty));
    let inputs = || vec![u32_bytes(&(0..n).map(|i| i * 3).collect::<Vec<_>>())];
    let case = |name: &str, body| Case::new(name, program(body), inputs());
    vec![
        case(
            "unknown node extension no lane reaches",
            when(0, vec![unknown_node()]),
        ),
        case(
            "unknown node extension some lanes reach",
            when(9, vec![unknown_node()]),
        )
        .failing(),
        case(
            "unknown u32 expression extension no lane reaches",
            when(0, vec![store(as_u32(DataType::U32))]),
        ),
        case(
            "unknown f32 expression extension some lanes reach",
            when(9, vec![store(as_u32(DataType::F32))]),
        )
        .failing(),
    ]
}

/// A barrier-holding `If` in a loop: the reference keeps every value its condition took
/// and fails once two differ, across iterations too, even when every lane agrees.
pub fn barrier_branch_history_cases() -> Vec<Case> {
    let n = 64;
    let program = |cond: Expr| {
        let barrier = Node::barrier_with_ordering(MemoryOrdering::SeqCst);
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::U32).with_count(n),
                BufferDecl::output("out", 1, DataType::U32).with_count(n),
            ],
            [n, 1, 1],
            vec![
                Node::let_bind("s", Expr::u32(0)),
                Node::loop_for(
                    "i",
                    Expr::u32(0),
                    Expr::u32(3),
                    vec![
                        Node::if_then(cond, vec![barrier]),
                        Node::assign("s", bin(BinOp::Add, Expr::var("s"), Expr::var("i"))),
                    ],
                ),
                Node::store("out", gid(), Expr::var("s")),
            ],
        )
    };
    let inputs = || vec![u32_bytes(&(0..n).map(|i| i + 1).collect::<Vec<_>>())];
    let workgroup_is = |value| bin(BinOp::Eq, Expr::WorkgroupId { axis: 0 }, Expr::u32(value));
    vec![
        Case::new(
            "barrier If in a loop whose condition holds every iteration",
            program(workgroup_is(0)),
            inputs(),
        ),
        Case::new(
            "barrier If in a loop whose condition never holds",
            program(workgroup_is(1)),
            inputs(),
        ),
        Case::new(
            "barrier If in a loop whose uniform condition changes between iterations",
            program(bin(BinOp::Lt, Expr::var("i"), Expr::u32(2))),
            inputs(),
        )
        .failing(),
    ]
}

/// Division and remainder by literal divisors (lowered without the general form's
/// zero test: shifts and masks for u32 powers of two, literal `div`/`rem` otherwise),
/// over edge dividends; i32 by 0 and by -1 keep the reference's run-time errors.
pub fn literal_divisor_cases() -> Vec<Case> {
    let mut rng = Rng::new(9);
    let unsigned = u32_bytes(&edge_u32(&mut rng, N));
    let signed = u32_bytes(&edge_i32(&mut rng, N));
    let u32_divisors = [1u32, 2, 3, 4, 7, 8, 10, 16, 31, 32, 1 << 31, u32::MAX];
    let i32_divisors = [1i32, 2, -2, 3, -3, 4, -4, 7, -8, i32::MIN, i32::MAX];
    let mut cases = Vec::new();
    for op in [BinOp::Div, BinOp::Mod] {
        for d in u32_divisors {
            let value = bin(op, ld("a"), Expr::u32(d));
            let program = elementwise(&[("a", DataType::U32)], DataType::U32, N, value);
            cases.push(Case::new(
                format!("u32 {op:?} {d}"),
                program,
                vec![unsigned.clone()],
            ));
        }
        for d in i32_divisors.into_iter().chain([0, -1]) {
            let value = bin(op, ld("a"), Expr::i32(d));
            let program = elementwise(&[("a", DataType::I32)], DataType::I32, N, value);
            let case = Case::new(format!("i32 {op:?} {d}"), program, vec![signed.clone()]);
            // By zero always, by -1 at i32::MIN (an edge dividend): the reference's errors.
            cases.push(if d == 0 || d == -1 {
                case.failing()
            } else {
                case
            });
        }
    }
    cases
}

/// Programs every invocation of which runs the same computation (no ids), reading what
/// earlier invocations wrote: the reference runs them one after another, so in parallel
/// they would race (vyre-libs' in-place FFT came out 1 ulp off on some runs).
pub fn replicated_cases() -> Vec<Case> {
    let mut rng = Rng::new(23);
    let mut cases = Vec::new();
    for n in [4u32, 64] {
        let program = vyre_libs::math::fft::fft_radix2_complex("input", "output", n)
            .expect("a power-of-two FFT size");
        let signal = f32_bytes(&edge_f32(&mut rng, 2 * n));
        let impulse =
            f32_bytes(&[[1.0f32, 0.0].as_slice(), &vec![0.0; 2 * n as usize - 2]].concat());
        cases.push(Case::new(
            format!("in-place fft_radix2 n={n} (edge values)"),
            program.clone(),
            vec![signal],
        ));
        cases.push(Case::new(
            format!("in-place fft_radix2 n={n} (impulse)"),
            program,
            vec![impulse],
        ));
    }
    let counter = |workgroup: u32, count: u32, body: Vec<Node>| {
        Program::wrapped(
            vec![
                BufferDecl::output("out", 0, DataType::U32).with_count(count),
                BufferDecl::workgroup("tile", 4, DataType::U32),
            ],
            [workgroup, 1, 1],
            body,
        )
    };
    let bump = |slot: u32| {
        Node::store(
            "out",
            Expr::u32(slot),
            bin(BinOp::Add, Expr::load("out", Expr::u32(slot)), Expr::u32(1)),
        )
    };
    // Every invocation of every workgroup bumps the counter once: 64 workgroups of 4.
    cases.push(Case::new(
        "replicated counter (4 lanes x 64 workgroups)",
        counter(4, 256, vec![bump(0)]),
        vec![],
    ));
    // `Return` ends one invocation's run only; the later ones still count.
    cases.push(Case::new(
        "replicated counter with an early return",
        counter(
            1,
            16,
            vec![
                bump(0),
                Node::if_then(
                    bin(BinOp::Ge, Expr::load("out", Expr::u32(0)), Expr::u32(5)),
                    vec![Node::Return],
                ),
                bump(1),
            ],
        ),
        vec![],
    ));
    // One invocation per workgroup: each sees the counter the previous ones left.
    cases.push(Case::new(
        "replicated atomic counter whose old values are summed",
        Program::wrapped(
            vec![
                BufferDecl::output("out", 0, DataType::U32).with_count(16),
                BufferDecl::read_write("hits", 1, DataType::U32).with_count(1),
            ],
            [1, 1, 1],
            vec![
                Node::let_bind("old", Expr::atomic_add("hits", Expr::u32(0), Expr::u32(1))),
                Node::store(
                    "out",
                    Expr::u32(1),
                    bin(
                        BinOp::Add,
                        Expr::load("out", Expr::u32(1)),
                        Expr::var("old"),
                    ),
                ),
            ],
        ),
        vec![u32_bytes(&[0])],
    ));
    // Workgroup memory is shared by a workgroup's lanes and zeroed for every workgroup.
    cases.push(Case::new(
        "replicated counter through workgroup memory and a barrier",
        counter(
            2,
            8,
            vec![
                Node::store(
                    "tile",
                    Expr::u32(1),
                    bin(BinOp::Add, Expr::load("tile", Expr::u32(1)), Expr::u32(3)),
                ),
                Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                Node::store(
                    "out",
                    Expr::u32(2),
                    bin(
                        BinOp::Mul,
                        bin(BinOp::Add, Expr::load("out", Expr::u32(2)), Expr::u32(1)),
                        Expr::load("tile", Expr::u32(1)),
                    ),
                ),
            ],
        ),
        vec![],
    ));
    cases
}

/// A read-only bytes buffer.
pub(super) fn bytes_in(name: &str, binding: u32, count: u32) -> BufferDecl {
    BufferDecl::read(name, binding, DataType::Bytes)
        .with_count(count)
        .with_bytes_extraction(true)
}

/// A backend-allocated bytes output.
fn bytes_out(name: &str, binding: u32, count: u32) -> BufferDecl {
    BufferDecl::output(name, binding, DataType::Bytes)
        .with_count(count)
        .with_bytes_extraction(true)
}

/// `Bytes` buffers: a load is the rest of the buffer from a byte offset (length known
/// at run time), a store writes all of the value's bytes, truncated at the buffer's end.
pub fn bytes_cases() -> Vec<Case> {
    let source: Vec<u8> = (0..37u32).map(|i| (i * 7 + 0x91) as u8).collect();
    let first = || bin(BinOp::Eq, gid(), Expr::u32(0));
    let below = |n: u32| bin(BinOp::Lt, gid(), Expr::u32(n));
    vec![
        Case::new(
            "bytes copy of the rest of the buffer from every offset",
            Program::wrapped(
                vec![bytes_in("a", 0, 37), bytes_out("out", 1, 40)],
                [64, 1, 1],
                vec![Node::if_then(
                    below(40),
                    vec![Node::store("out", gid(), Expr::load("a", gid()))],
                )],
            ),
            vec![source.clone()],
        ),
        Case::new(
            "bytes copies truncate at either end and skip past-the-end offsets",
            Program::wrapped(
                vec![bytes_in("a", 0, 37), bytes_out("out", 1, 40)],
                [32, 1, 1],
                vec![Node::if_then(
                    first(),
                    vec![
                        Node::store("out", Expr::u32(5), Expr::load("a", Expr::u32(30))),
                        Node::store("out", Expr::u32(38), Expr::load("a", Expr::u32(0))),
                        Node::store("out", Expr::u32(20), Expr::load("a", Expr::u32(37))),
                        Node::store("out", Expr::u32(21), Expr::load("a", Expr::u32(90))),
                        // A constant index past the end fails validation; this one is 40 at run time.
                        Node::store(
                            "out",
                            bin(BinOp::Add, gid(), Expr::u32(40)),
                            Expr::load("a", Expr::u32(1)),
                        ),
                    ],
                )],
            ),
            vec![source.clone()],
        ),
        Case::new(
            "bytes select between two views and a cast to bytes keep the bytes",
            Program::wrapped(
                vec![bytes_in("a", 0, 37), bytes_out("out", 1, 40)],
                [32, 1, 1],
                vec![Node::if_then(
                    first(),
                    vec![
                        Node::store(
                            "out",
                            Expr::u32(3),
                            Expr::select(
                                bin(BinOp::Eq, gid(), Expr::u32(0)),
                                Expr::load("a", Expr::u32(30)),
                                Expr::load("a", Expr::u32(2)),
                            ),
                        ),
                        Node::store(
                            "out",
                            Expr::u32(20),
                            Expr::select(
                                bin(BinOp::Ne, gid(), Expr::u32(0)),
                                Expr::load("a", Expr::u32(1)),
                                Expr::Cast {
                                    target: DataType::Bytes,
                                    value: Box::new(Expr::load("a", Expr::u32(25))),
                                },
                            ),
                        ),
                    ],
                )],
            ),
            vec![source.clone()],
        ),
        Case::new(
            "bytes view bound by let is copied later",
            Program::wrapped(
                vec![bytes_in("a", 0, 37), bytes_out("out", 1, 40)],
                [32, 1, 1],
                vec![
                    Node::let_bind("tail", Expr::load("a", Expr::u32(33))),
                    Node::if_then(
                        first(),
                        vec![
                            Node::store("out", Expr::u32(0), Expr::load("a", Expr::u32(0))),
                            Node::store("out", Expr::u32(2), Expr::var("tail")),
                        ],
                    ),
                ],
            ),
            vec![source.clone()],
        ),
        Case::new(
            "bytes load stored into u32 keeps its first four bytes",
            Program::wrapped(
                vec![
                    bytes_in("a", 0, 37),
                    BufferDecl::output("out", 1, DataType::U32).with_count(40),
                ],
                [64, 1, 1],
                vec![Node::if_then(
                    below(40),
                    vec![Node::store("out", gid(), Expr::load("a", gid()))],
                )],
            ),
            vec![source.clone()],
        ),
        Case::new(
            "u32 stores into a bytes buffer truncate at its end",
            Program::wrapped(
                vec![bytes_out("out", 0, 38)],
                [16, 1, 1],
                vec![Node::if_then(
                    below(10),
                    vec![Node::store(
                        "out",
                        bin(BinOp::Mul, gid(), Expr::u32(4)),
                        bin(
                            BinOp::Add,
                            bin(BinOp::Mul, gid(), Expr::u32(0x0102_0304)),
                            Expr::u32(0xA0B0_C0D0),
                        ),
                    )],
                )],
            ),
            vec![],
        ),
        Case::new(
            "async load between bytes buffers",
            Program::wrapped(
                vec![bytes_in("a", 0, 37), bytes_out("out", 1, 16)],
                [4, 1, 1],
                vec![Node::if_then(
                    first(),
                    vec![
                        Node::async_load_gpu_driven("a", "out", Expr::u32(29), Expr::u32(12), "t"),
                        Node::AsyncWait { tag: "t".into() },
                    ],
                )],
            ),
            vec![source.clone()],
        ),
        Case::new(
            "async store between bytes buffers",
            Program::wrapped(
                vec![bytes_in("a", 0, 37), bytes_out("out", 1, 40)],
                [4, 1, 1],
                vec![Node::if_then(
                    first(),
                    vec![
                        Node::async_store("a", "out", Expr::u32(9), Expr::u32(37), "t"),
                        Node::AsyncWait { tag: "t".into() },
                    ],
                )],
            ),
            vec![source.clone()],
        ),
        Case::new(
            "unaligned u32 stores into a read-write bytes buffer",
            Program::wrapped(
                vec![
                    BufferDecl::storage("io", 0, BufferAccess::ReadWrite, DataType::Bytes)
                        .with_count(23)
                        .with_bytes_extraction(true),
                ],
                [8, 1, 1],
                vec![Node::if_then(
                    below(6),
                    vec![Node::store(
                        "io",
                        bin(
                            BinOp::Add,
                            bin(BinOp::Mul, gid(), Expr::u32(4)),
                            Expr::u32(3),
                        ),
                        bin(BinOp::BitXor, gid(), Expr::u32(0xDEAD_BEEF)),
                    )],
                )],
            ),
            vec![(0..23u8).map(|i| i.wrapping_mul(11)).collect()],
        ),
        Case::new(
            "bytes copies within one read-write buffer behave like memmove",
            Program::wrapped(
                vec![
                    BufferDecl::storage("io", 0, BufferAccess::ReadWrite, DataType::Bytes)
                        .with_count(29)
                        .with_bytes_extraction(true),
                    BufferDecl::output("word", 1, DataType::U32).with_count(2),
                ],
                [8, 1, 1],
                vec![Node::if_then(
                    first(),
                    vec![
                        // Up by 3 (overlapping: must copy from the top), then down by 5.
                        Node::store("io", Expr::u32(7), Expr::load("io", Expr::u32(4))),
                        Node::store("io", Expr::u32(1), Expr::load("io", Expr::u32(6))),
                        // After both copies, the u32 prefix of the rest from byte 9.
                        Node::store("word", Expr::u32(1), Expr::load("io", Expr::u32(9))),
                    ],
                )],
            ),
            vec![(0..29u8)
                .map(|i| i.wrapping_mul(13).wrapping_add(5))
                .collect()],
        ),
    ]
}

/// A workgroup bytes buffer of `count` bytes.
fn bytes_shared(name: &str, count: u32) -> BufferDecl {
    BufferDecl::workgroup(name, count, DataType::Bytes).with_bytes_extraction(true)
}

/// A read-write buffer standing for a second output (a program has one `output`); its
/// input is `count * stride` zero bytes.
fn rw_out(
    name: &str,
    binding: u32,
    element: DataType,
    count: u32,
    stride: usize,
) -> (BufferDecl, Vec<u8>) {
    let bytes = element == DataType::Bytes;
    let decl = BufferDecl::storage(name, binding, BufferAccess::ReadWrite, element)
        .with_count(count)
        .with_bytes_extraction(bytes);
    (decl, vec![0; count as usize * stride])
}

/// A read-write bytes buffer.
fn bytes_io(name: &str, binding: u32, count: u32) -> BufferDecl {
    BufferDecl::storage(name, binding, BufferAccess::ReadWrite, DataType::Bytes)
        .with_count(count)
        .with_bytes_extraction(true)
}

/// 37 source bytes ending in `[0, 4, 0, 0, 0]`: the views from bytes 32..37 are 5 bytes
/// (no u32 reading), then `[4, 0, 0, 0]` (4), then zeros.
pub(super) fn bytes_tail_source() -> Vec<u8> {
    let mut source: Vec<u8> = (0..37u32).map(|i| (i * 7 + 0x91) as u8).collect();
    source[32..].copy_from_slice(&[0, 4, 0, 0, 0]);
    source
}

/// Bytes views in workgroup memory, as indices and conditions, meeting operators (a
/// run-time error in the reference), assigned, and bound from writable buffers.
pub fn bytes_view_cases() -> Vec<Case> {
    let mut cases = shared_bytes_cases();
    cases.extend(bytes_scalar_use_cases());
    cases.extend(bytes_binding_cases());
    cases
}

fn shared_bytes_cases() -> Vec<Case> {
    let lid = || Expr::LocalId { axis: 0 };
    let lane0 = || bin(BinOp::Eq, lid(), Expr::u32(0));
    let barrier = || Node::barrier_with_ordering(MemoryOrdering::SeqCst);
    let source = bytes_tail_source();
    vec![
        Case::new(
            "workgroup bytes buffer: u32 stores truncated at its end, read back as u32 and copied out",
            Program::wrapped(
                vec![
                    bytes_shared("shb", 125),
                    BufferDecl::output("words", 0, DataType::U32).with_count(64),
                    rw_out("out", 1, DataType::Bytes, 140, 1).0,
                ],
                [32, 1, 1],
                vec![
                    Node::store(
                        "shb",
                        bin(BinOp::Mul, lid(), Expr::u32(4)),
                        bin(
                            BinOp::Add,
                            bin(BinOp::Mul, gid(), Expr::u32(0x0103_0507)),
                            Expr::u32(0x11),
                        ),
                    ),
                    barrier(),
                    Node::store(
                        "words",
                        gid(),
                        Expr::load(
                            "shb",
                            bin(
                                BinOp::Mod,
                                bin(BinOp::Add, bin(BinOp::Mul, lid(), Expr::u32(4)), Expr::u32(5)),
                                Expr::u32(125),
                            ),
                        ),
                    ),
                    Node::if_then(
                        lane0(),
                        vec![Node::store(
                            "out",
                            bin(BinOp::Mul, Expr::WorkgroupId { axis: 0 }, Expr::u32(70)),
                            Expr::load("shb", Expr::u32(61)),
                        )],
                    ),
                ],
            ),
            vec![vec![0; 140]],
        ),
        Case::new(
            "workgroup bytes buffer: copies in from global, memmove within, and out",
            Program::wrapped(
                vec![
                    bytes_in("a", 0, 37),
                    bytes_shared("shb", 40),
                    bytes_out("out", 1, 90),
                ],
                [32, 1, 1],
                vec![
                    Node::if_then(
                        lane0(),
                        vec![Node::store("shb", Expr::u32(2), Expr::load("a", Expr::u32(5)))],
                    ),
                    barrier(),
                    Node::if_then(
                        lane0(),
                        vec![
                            Node::store("shb", Expr::u32(0), Expr::load("shb", Expr::u32(1))),
                            Node::store("shb", Expr::u32(7), Expr::load("shb", Expr::u32(3))),
                        ],
                    ),
                    barrier(),
                    Node::if_then(
                        bin(BinOp::Eq, gid(), Expr::u32(0)),
                        vec![
                            Node::store("out", Expr::u32(0), Expr::load("shb", Expr::u32(0))),
                            // A generic view: the arms live in different spaces.
                            Node::store(
                                "out",
                                Expr::u32(41),
                                Expr::select(lane0(), Expr::load("shb", Expr::u32(30)), Expr::load("a", Expr::u32(3))),
                            ),
                            Node::store(
                                "out",
                                Expr::u32(60),
                                Expr::select(
                                    bin(BinOp::Ne, lid(), Expr::u32(0)),
                                    Expr::load("shb", Expr::u32(30)),
                                    Expr::load("a", Expr::u32(3)),
                                ),
                            ),
                        ],
                    ),
                ],
            ),
            vec![source],
        ),
    ]
}

fn bytes_scalar_use_cases() -> Vec<Case> {
    let source = bytes_tail_source();
    let vals = u32_bytes(&(0..16).map(|i| 1000 + i).collect::<Vec<_>>());
    let from = |n: u32| bin(BinOp::Ge, gid(), Expr::u32(n));
    let below = |n: u32| bin(BinOp::Lt, gid(), Expr::u32(n));
    let words = || BufferDecl::output("out", 2, DataType::U32).with_count(40);
    let failing = |name: &str, value: Expr| {
        Case::new(
            name,
            Program::wrapped(
                vec![bytes_in("a", 0, 37), words()],
                [32, 1, 1],
                vec![Node::if_then(below(40), vec![Node::let_bind("y", value)])],
            ),
            vec![bytes_tail_source()],
        )
        .failing()
    };
    vec![
        Case::new(
            "bytes views of at most four bytes as indices, and as select conditions",
            Program::wrapped(
                vec![
                    bytes_in("a", 0, 37),
                    BufferDecl::read("vals", 1, DataType::U32).with_count(16),
                    words(),
                    rw_out("picked", 3, DataType::U32, 40, 4).0,
                ],
                [32, 1, 1],
                vec![
                    Node::if_then(
                        bin(BinOp::And, from(33), below(40)),
                        vec![Node::store(
                            "out",
                            gid(),
                            Expr::load("vals", Expr::load("a", gid())),
                        )],
                    ),
                    Node::if_then(
                        below(40),
                        vec![Node::store(
                            "picked",
                            gid(),
                            Expr::select(
                                Expr::load("a", gid()),
                                bin(BinOp::Add, gid(), Expr::u32(100)),
                                bin(BinOp::Add, gid(), Expr::u32(200)),
                            ),
                        )],
                    ),
                ],
            ),
            vec![source, vals, vec![0; 160]],
        ),
        failing(
            "a bytes view of more than four bytes as an index fails",
            Expr::load("a", Expr::load("a", gid())),
        ),
        failing(
            "a bytes view as an arithmetic operand fails",
            bin(BinOp::Add, Expr::u32(1), Expr::load("a", gid())),
        ),
        failing(
            "a comparison of two bytes views fails",
            bin(
                BinOp::Eq,
                Expr::load("a", gid()),
                Expr::load("a", Expr::u32(3)),
            ),
        ),
    ]
}

fn bytes_binding_cases() -> Vec<Case> {
    let odd = || {
        bin(
            BinOp::Eq,
            bin(BinOp::BitAnd, gid(), Expr::u32(1)),
            Expr::u32(1),
        )
    };
    let below = |n: u32| bin(BinOp::Lt, gid(), Expr::u32(n));
    let io: Vec<u8> = (0..29u8)
        .map(|i| i.wrapping_mul(29).wrapping_add(3))
        .collect();
    vec![
        Case::new(
            "a bytes variable assigned views of another buffer and of zero-filled workgroup memory",
            Program::wrapped(
                vec![
                    bytes_in("a", 0, 37),
                    // Never written: its views keep the zero fill and may be read late.
                    bytes_shared("shb", 40),
                    BufferDecl::output("words", 1, DataType::U32).with_count(64),
                    rw_out("out", 2, DataType::Bytes, 80, 1).0,
                ],
                [32, 1, 1],
                vec![
                    Node::let_bind("v", Expr::load("a", bin(BinOp::Mod, gid(), Expr::u32(8)))),
                    Node::if_then(
                        odd(),
                        vec![Node::assign(
                            "v",
                            Expr::load("shb", bin(BinOp::Mod, gid(), Expr::u32(16))),
                        )],
                    ),
                    Node::store("words", gid(), Expr::var("v")),
                    Node::if_then(
                        below(2),
                        vec![Node::store(
                            "out",
                            bin(BinOp::Mul, gid(), Expr::u32(40)),
                            Expr::var("v"),
                        )],
                    ),
                ],
            ),
            vec![bytes_tail_source(), vec![0; 80]],
        ),
        Case::new(
            "a let of a load from a read-write bytes buffer the program never writes",
            Program::wrapped(
                vec![
                    bytes_io("io", 0, 29),
                    BufferDecl::output("words", 1, DataType::U32).with_count(32),
                    bytes_io("scratch", 2, 8),
                ],
                [32, 1, 1],
                vec![
                    Node::let_bind("t", Expr::load("io", gid())),
                    // Written, so a view of it is never read late: this one is unread.
                    Node::let_bind("unread", Expr::load("scratch", Expr::u32(1))),
                    // One lane stores: a u32 stored into bytes covers four bytes, and
                    // lanes storing at neighbouring offsets would race.
                    Node::if_then(
                        bin(BinOp::Eq, gid(), Expr::u32(0)),
                        vec![Node::store("scratch", gid(), Expr::u32(0xABCD_EF01))],
                    ),
                    Node::store("words", gid(), Expr::var("t")),
                ],
            ),
            vec![io, vec![7; 8]],
        ),
    ]
}

/// A `Let` of a load from a bytes buffer the program writes, its variable read only before
/// the invocation's next write to the buffer (or by the store of the variable itself, which
/// reads the bytes before it writes): the reference's snapshot and the late view agree.
pub fn bytes_read_before_write_cases() -> Vec<Case> {
    let source: Vec<u8> = (0..64u32).map(|i| (i * 13 + 5) as u8).collect();
    let lanes = 8u32;
    let program = |body: Vec<Node>, invocations: u32| {
        Program::wrapped(
            vec![
                bytes_io("io", 0, 64),
                BufferDecl::output("out", 1, DataType::U32).with_count(lanes),
            ],
            [invocations, 1, 1],
            body,
        )
    };
    let own = || bin(BinOp::Mul, gid(), Expr::u32(8));
    let own_plus = |k: u32| bin(BinOp::Add, own(), Expr::u32(k));
    vec![
        Case::new(
            "bytes let of a written buffer read before the invocation's own store",
            program(
                vec![
                    Node::let_bind("rest", Expr::load("io", own())),
                    Node::store(
                        "out",
                        gid(),
                        Expr::select(Expr::var("rest"), gid(), Expr::u32(7)),
                    ),
                    Node::store("out", gid(), Expr::var("rest")),
                    Node::store("io", own(), bin(BinOp::Mul, gid(), Expr::u32(0x0101_0101))),
                    Node::store("io", own_plus(4), bin(BinOp::Add, gid(), Expr::u32(9))),
                ],
                lanes,
            ),
            vec![source.clone(), vec![0; lanes as usize * 4]],
        ),
        Case::new(
            "bytes let of a written buffer copied into it by its last read",
            program(
                vec![
                    Node::let_bind("rest", Expr::load("io", Expr::u32(2))),
                    Node::store("out", Expr::u32(0), Expr::var("rest")),
                    Node::store("io", Expr::u32(10), Expr::var("rest")),
                    Node::store("io", Expr::u32(0), Expr::u32(0xAABB_CCDD)),
                ],
                1,
            ),
            vec![source, vec![0; lanes as usize * 4]],
        ),
    ]
}
