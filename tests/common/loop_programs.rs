//! Loops whose loads one test before the loop checks (`analysis::loop_bounds`): the
//! emitter runs an unchecked copy of the loop where that test shows every iteration in
//! bounds, and the checked copy elsewhere. Each case has invocations on both sides of the
//! test, indices that wrap, empty loops and element widths of every plain load. Appended
//! after every other semantic case.

#![allow(dead_code)]

use super::gpu::{f32_bytes, Rng};
use super::programs::Case;
use super::subgroup_programs::{bin, gid, u, var};
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program};

fn add(l: Expr, r: Expr) -> Expr {
    bin(BinOp::Add, l, r)
}

fn mul(l: Expr, r: Expr) -> Expr {
    bin(BinOp::Mul, l, r)
}

/// vyre-libs' matmul body (`out[r, c] = sum_k a[r, k] * b[k, c]`, u32 wrapping) over an
/// `a` that declares `a_rows` of the `m` rows: the rows past it read zeros.
fn dot_products(m: u32, k: u32, n: u32, a_rows: u32) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(a_rows * k),
            BufferDecl::read("b", 1, DataType::U32).with_count(k * n),
            BufferDecl::output("out", 2, DataType::U32).with_count(m * n),
        ],
        [64, 1, 1],
        vec![
            Node::let_bind("idx", gid()),
            Node::let_bind("row", bin(BinOp::Div, var("idx"), u(n))),
            Node::let_bind("col", bin(BinOp::Mod, var("idx"), u(n))),
            Node::if_then(
                bin(BinOp::Lt, var("idx"), Expr::buf_len("out")),
                vec![
                    Node::let_bind("acc", u(0)),
                    Node::loop_for(
                        "kk",
                        u(0),
                        u(k),
                        vec![Node::assign(
                            "acc",
                            add(
                                var("acc"),
                                mul(
                                    Expr::load("a", add(mul(var("row"), u(k)), var("kk"))),
                                    Expr::load("b", add(mul(var("kk"), u(n)), var("col"))),
                                ),
                            ),
                        )],
                    ),
                    Node::store("out", var("idx"), var("acc")),
                ],
            ),
        ],
    )
}

/// `out[gid] = sum over kk in [from, to) of a[index(kk)]`, one invocation per output,
/// `a` of `a_count` elements of `element` (wrapping u32 or f32 sums; u64 keeps the last).
fn sum_loop(
    element: DataType,
    a_count: u32,
    out_count: u32,
    (from, to): (Expr, Expr),
    index: Expr,
) -> Program {
    // A u64 loop keeps the last load (vyre's validator types u64 arithmetic as u32).
    let next = match element {
        DataType::U64 => Expr::load("a", index),
        _ => add(var("acc"), Expr::load("a", index)),
    };
    let zero = match element {
        DataType::F32 => Expr::f32(0.0),
        DataType::U64 => Expr::Cast {
            target: DataType::U64,
            value: Box::new(u(0)),
        },
        _ => u(0),
    };
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, element.clone()).with_count(a_count),
            BufferDecl::output("out", 1, element).with_count(out_count),
        ],
        [32, 1, 1],
        vec![
            Node::let_bind("acc", zero),
            Node::let_bind("three", u(3)),
            Node::loop_for("kk", from, to, vec![Node::assign("acc", next)]),
            Node::store("out", gid(), var("acc")),
        ],
    )
}

/// `out[gid*4 + kk] = a[gid*4 + kk]` for kk in 0..4: a copy of 16-byte elements whose
/// last invocations read past `a`'s end.
fn vec4_copy(a_count: u32, out_count: u32) -> Program {
    let at = || add(mul(gid(), u(4)), var("kk"));
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::Vec4U32).with_count(a_count),
            BufferDecl::output("out", 1, DataType::Vec4U32).with_count(out_count),
        ],
        [16, 1, 1],
        vec![Node::loop_for(
            "kk",
            u(0),
            u(4),
            vec![Node::store("out", at(), Expr::load("a", at()))],
        )],
    )
}

/// `tile[lid] = a[gid]`, a barrier, then `out[gid] = sum over kk in 0..8 of
/// tile[lid + kk]`: a workgroup buffer of 64 elements, whose last seven lanes' sums read
/// past its end (zeros) through the checked copy.
fn workgroup_window_sums() -> Program {
    let lid = Expr::LocalId { axis: 0 };
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(128),
            BufferDecl::workgroup("tile", 64, DataType::U32),
            BufferDecl::output("out", 1, DataType::U32).with_count(128),
        ],
        [64, 1, 1],
        vec![
            Node::store("tile", lid.clone(), Expr::load("a", gid())),
            Node::barrier(),
            Node::let_bind("acc", u(0)),
            Node::loop_for(
                "kk",
                u(0),
                u(8),
                vec![Node::assign(
                    "acc",
                    add(var("acc"), Expr::load("tile", add(lid, var("kk")))),
                )],
            ),
            Node::store("out", gid(), var("acc")),
        ],
    )
}

/// The cases: see the module documentation.
pub fn hoisted_bounds_cases() -> Vec<Case> {
    let mut rng = Rng::new(0x100b);
    let words = |rng: &mut Rng, n: usize| rng.bytes_u32(n);
    let mut cases = vec![
        Case::new(
            "dot-product loop: every row in bounds (the unchecked copy)",
            dot_products(8, 16, 4, 8),
            vec![words(&mut rng, 8 * 16), words(&mut rng, 16 * 4)],
        ),
        Case::new(
            "dot-product loop: rows past a's end read zeros (the checked copy beside it)",
            dot_products(8, 16, 4, 5),
            vec![words(&mut rng, 5 * 16), words(&mut rng, 16 * 4)],
        ),
        Case::new(
            "loop load at gid + kk - 3 (a wrapping invariant term): early invocations wrap out of bounds",
            sum_loop(
                DataType::U32,
                40,
                64,
                (u(0), u(5)),
                add(
                    add(mul(var("three"), u(u32::MAX)), gid()),
                    var("kk"),
                ),
            ),
            vec![words(&mut rng, 40)],
        ),
        Case::new(
            "loop load at kk * 65536 whose last index wraps to 0: the test must not wrap",
            sum_loop(
                DataType::U32,
                16,
                1,
                (u(65535), u(65537)),
                mul(var("kk"), u(65536)),
            ),
            vec![words(&mut rng, 16)],
        ),
        Case::new(
            "empty loops (to = 0, from > to) read nothing",
            sum_loop(
                DataType::U32,
                8,
                32,
                (
                    bin(BinOp::Mod, gid(), u(3)),
                    bin(BinOp::Mul, bin(BinOp::Mod, gid(), u(2)), u(2)),
                ),
                add(gid(), var("kk")),
            ),
            vec![words(&mut rng, 8)],
        ),
        Case::new(
            "loop bound from the data: each invocation's own test",
            sum_loop(
                DataType::U32,
                48,
                32,
                (u(0), bin(BinOp::Mod, Expr::load("a", gid()), u(40))),
                add(gid(), var("kk")),
            ),
            vec![words(&mut rng, 48)],
        ),
        Case::new(
            "loop over the buffer's length (to = BufLen)",
            sum_loop(
                DataType::U32,
                24,
                32,
                (gid(), Expr::buf_len("a")),
                add(var("kk"), u(0)),
            ),
            vec![words(&mut rng, 24)],
        ),
        Case::new(
            "workgroup-buffer window sums: the last lanes read past the tile's end",
            workgroup_window_sums(),
            vec![words(&mut rng, 128)],
        ),
        Case::new(
            "vec4 copy loop: the last invocations read past a's end",
            vec4_copy(50, 64),
            vec![words(&mut rng, 50 * 4)],
        ),
    ];
    // f32 lanes (subnormals flush, NaNs canonicalise, as in the checked load) and u64 ones.
    let mut floats: Vec<f32> = (0..40).map(|i| i as f32 * 0.37 - 3.0).collect();
    floats[3] = f32::from_bits(1);
    floats[7] = f32::NAN;
    floats[11] = -0.0;
    cases.push(Case::new(
        "f32 loop sums: subnormal, NaN and -0 loads through both copies",
        sum_loop(DataType::F32, 40, 32, (u(0), u(9)), add(gid(), var("kk"))),
        vec![f32_bytes(&floats)],
    ));
    cases.push(Case::new(
        "u64 loop: 8-byte loads through both copies",
        sum_loop(DataType::U64, 36, 32, (u(1), u(6)), add(var("kk"), gid())),
        vec![words(&mut rng, 72)],
    ));
    cases
}
