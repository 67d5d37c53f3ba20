//! Small branches in loops that the emitter runs as straight-line code
//! (`lower::speculate`): the body is evaluated in every iteration, and only its faults,
//! stores and assignments are guarded by the condition. Each case has iterations on both
//! sides of the condition, and bodies that would fault, store or read out of bounds where
//! the reference skips them. Appended after every other semantic case.

#![allow(dead_code)]

use super::gpu::{u32_bytes, Rng};
use super::programs::Case;
use super::subgroup_programs::{bin, gid, u, var};
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program};

const INVOCATIONS: u32 = 128;

fn add(l: Expr, r: Expr) -> Expr {
    bin(BinOp::Add, l, r)
}

fn i(value: i32) -> Expr {
    Expr::LitI32(value)
}

/// `acc = 0; loop k in 0..16 { let j = (gid + k) % 128; let d = b[j]; if cond(d) { acc =
/// acc + a[j] / d } }; out[gid] = acc` over i32 `a` and `b`: a division by zero faults
/// in the reference (SignedDivisionByZero) only where the branch is taken.
fn guarded_division(cond: impl Fn(Expr) -> Expr) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::I32).with_count(INVOCATIONS),
            BufferDecl::read("b", 1, DataType::I32).with_count(INVOCATIONS),
            BufferDecl::output("out", 2, DataType::I32).with_count(INVOCATIONS),
        ],
        [64, 1, 1],
        vec![
            Node::let_bind("acc", i(0)),
            Node::loop_for(
                "k",
                u(0),
                u(16),
                vec![
                    Node::let_bind("j", bin(BinOp::Mod, add(gid(), var("k")), u(INVOCATIONS))),
                    Node::let_bind("d", Expr::load("b", var("j"))),
                    Node::if_then(
                        cond(var("d")),
                        vec![Node::assign(
                            "acc",
                            add(
                                var("acc"),
                                bin(BinOp::Div, Expr::load("a", var("j")), var("d")),
                            ),
                        )],
                    ),
                ],
            ),
            Node::store("out", gid(), var("acc")),
        ],
    )
}

/// `loop k in 0..8 { let j = gid * 8 + k; if a[j] % 3 != 0 { let t = a[j] * 3 + k;
/// out[j] = t } }` over u32 `a` and a read-write `out`: the elements of skipped iterations
/// keep their input.
fn guarded_stores() -> Program {
    let n = INVOCATIONS * 8;
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read_write("out", 1, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        vec![Node::loop_for(
            "k",
            u(0),
            u(8),
            vec![
                Node::let_bind("j", add(bin(BinOp::Mul, gid(), u(8)), var("k"))),
                Node::if_then(
                    bin(
                        BinOp::Ne,
                        bin(BinOp::Mod, Expr::load("a", var("j")), u(3)),
                        u(0),
                    ),
                    vec![
                        Node::let_bind(
                            "t",
                            add(bin(BinOp::Mul, Expr::load("a", var("j")), u(3)), var("k")),
                        ),
                        Node::store("out", var("j"), var("t")),
                    ],
                ),
            ],
        )],
    )
}

/// `acc = 0; loop k in 0..24 { let j = gid * 24 + k; if j < limit { acc = acc ^ (a[j] +
/// k) } }; out[gid] = acc` over a u32 `a` of 200 elements: most indices are past its end,
/// so the loads of skipped and taken iterations alike read the reference's zero there.
fn guarded_loads_past_the_end(limit: u32) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(200),
            BufferDecl::output("out", 1, DataType::U32).with_count(INVOCATIONS),
        ],
        [64, 1, 1],
        vec![
            Node::let_bind("acc", u(0)),
            Node::loop_for(
                "k",
                u(0),
                u(24),
                vec![
                    Node::let_bind("j", add(bin(BinOp::Mul, gid(), u(24)), var("k"))),
                    Node::if_then(
                        bin(BinOp::Lt, var("j"), u(limit)),
                        vec![Node::assign(
                            "acc",
                            bin(
                                BinOp::BitXor,
                                var("acc"),
                                add(Expr::load("a", var("j")), var("k")),
                            ),
                        )],
                    ),
                ],
            ),
            Node::store("out", gid(), var("acc")),
        ],
    )
}

/// Every speculated-branch case.
pub fn speculated_branch_cases() -> Vec<Case> {
    let mut rng = Rng::new(0x5bec);
    let a: Vec<u32> = (0..INVOCATIONS)
        .map(|_| ((rng.next_u32() % 2001) as i32 - 1000) as u32)
        .collect();
    // Every fourth divisor zero, some -1 (i32::MIN / -1 is not in `a`).
    let b: Vec<u32> = (0..INVOCATIONS)
        .map(|k| match k % 4 {
            0 => 0,
            1 => (-1i32) as u32,
            _ => (k as i32 % 7 + 2) as u32,
        })
        .collect();
    let words = |rng: &mut Rng, n: u32| rng.bytes_u32(n as usize);
    vec![
        Case::new(
            "speculated branch: a division by zero the branch skips",
            guarded_division(|d| bin(BinOp::Ne, d, i(0))),
            vec![u32_bytes(&a), u32_bytes(&b)],
        ),
        Case::new(
            "speculated branch: a division by zero the branch takes fails",
            guarded_division(|d| bin(BinOp::Ne, d, i(1))),
            vec![u32_bytes(&a), u32_bytes(&b)],
        )
        .failing(),
        Case::new(
            "speculated branch: stores and a Let of skipped iterations leave no trace",
            guarded_stores(),
            vec![
                words(&mut rng, INVOCATIONS * 8),
                words(&mut rng, INVOCATIONS * 8),
            ],
        ),
        Case::new(
            "speculated branch: loads past the buffer's end, taken and skipped",
            guarded_loads_past_the_end(1000),
            vec![words(&mut rng, 200)],
        ),
        Case::new(
            "speculated branch: loads past the buffer's end, every load skipped past 150",
            guarded_loads_past_the_end(150),
            vec![words(&mut rng, 200)],
        ),
    ]
}
