//! Subgroup operations whose lanes the reference reads at different steps (issue 17's
//! last family): data-dependent branches of unequal length, data-dependent loops,
//! `Return`s inside loops, variables bound after a branch, operands over a buffer the
//! program writes. The emitter lowers them as a step machine (`lower::steps`), which must
//! reproduce the reference's rounds exactly. Appended after every other semantic case.

#![allow(dead_code)]

use super::gpu::{f32_bytes, u32_bytes};
use super::programs::{bytes_in, bytes_tail_source, Case};
use super::subgroup_programs::{
    ballot, bin, gid, lanes, modulo_is, reduce, shuffle, u, values, var, with_lane_ids,
};
use vyre_foundation::ir::{
    AtomicOp, BinOp, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program, SubgroupReduceOp,
};

const WORKGROUPS: [u32; 3] = [64, 48, 40];

fn add(l: Expr, r: Expr) -> Expr {
    bin(BinOp::Add, l, r)
}

fn rem(l: Expr, m: u32) -> Expr {
    bin(BinOp::Mod, l, u(m))
}

fn sum(value: Expr) -> Expr {
    reduce(SubgroupReduceOp::Add, value)
}

/// `body`, then a barrier: the program's `Region` closes when a lane finishes, unbinding
/// its variables, so lanes that finish early would fail the slower lanes' subgroup
/// operands in the reference; at the barrier they wait with their variables bound.
fn case(name: &str, workgroup: u32, mut body: Vec<Node>) -> Case {
    body.push(Node::barrier_with_ordering(MemoryOrdering::SeqCst));
    padded(name, workgroup, body)
}

fn padded(name: &str, workgroup: u32, body: Vec<Node>) -> Case {
    let n = workgroup * 2;
    Case::new(
        format!("step machine: {name}, workgroup {workgroup}"),
        lanes(DataType::U32, n, n, workgroup, body),
        vec![values(n)],
    )
}

/// Every step-machine case.
pub fn step_machine_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for workgroup in WORKGROUPS {
        cases.push(case(
            "branch of unequal length",
            workgroup,
            unequal_branch(),
        ));
        let mut padding = unequal_branch();
        padding.extend((0..4).map(|i| Node::let_bind(format!("pad{i}"), u(i))));
        cases.push(padded(
            "branch of unequal length, padded",
            workgroup,
            padding,
        ));
        // Unpadded, the short lanes finish (closing the program's region) before the
        // long ones evaluate: their variables are gone and the reference fails.
        cases.push(
            padded(
                "lanes finished before the operation",
                workgroup,
                unequal_branch(),
            )
            .failing(),
        );
        cases.push(case(
            "Return inside a data-dependent loop",
            workgroup,
            return_in_data_dependent_loop(),
        ));
        cases.push(case(
            "reduce in a data-dependent loop",
            workgroup,
            loop_reduce(),
        ));
        cases.push(case(
            "ballot and shuffle in a data-dependent loop",
            workgroup,
            loop_ballot(),
        ));
        cases.push(case("Return inside a loop", workgroup, return_in_loop()));
        cases.push(case("after a data-dependent loop", workgroup, after_loop()));
        cases.push(case(
            "operand loads a written buffer",
            workgroup,
            serial_round(),
        ));
        cases.push(case("barrier in a uniform loop", workgroup, barrier_loop()));
        cases.push(case(
            "nested data-dependent loops",
            workgroup,
            nested_loops(),
        ));
        cases.push(case("variable bound after a branch", workgroup, bound_late()).failing());
    }
    cases.push(f32_fold_in_loop());
    cases.push(atomic_in_operand());
    cases.push(counters_case(
        "two atomics on one buffer in a reduce operand",
        |atomic| sum(add(atomic(u(1), var("v")), atomic(u(1), u(1)))),
    ));
    cases.push(counters_case(
        "an atomic on one buffer in another's operand, in a ballot",
        |atomic| {
            ballot(bin(
                BinOp::Lt,
                rem(atomic(u(0), atomic(u(1), u(3))), 64),
                u(32),
            ))
        },
    ));
    cases.push(counters_case(
        "two atomics on one buffer in a shuffle's value",
        |atomic| {
            shuffle(
                bin(BinOp::BitXor, atomic(u(2), u(5)), atomic(u(2), var("v"))),
                rem(add(var("lin"), u(7)), 32),
            )
        },
    ));
    for workgroup in WORKGROUPS {
        cases.push(case(
            "16-byte variable in a data-dependent loop",
            workgroup,
            wide_in_loop(),
        ));
        cases.push(case(
            "16-byte variable of returned lanes",
            workgroup,
            wide_after_return(),
        ));
    }
    cases
}

/// Step machines whose data-dependent branches hold barriers (appended last: the
/// semantic cases before keep their indices).
pub fn divergent_barrier_cases() -> Vec<Case> {
    WORKGROUPS
        .into_iter()
        .flat_map(barrier_in_data_dependent_branch)
        .collect()
}

/// A barrier in a branch whose condition is data-dependent (the workgroup takes its
/// rounds together and checks the branch's histories after each): every lane taking it;
/// lanes disagreeing within a warp and across warps (the reference fails); lanes
/// disagreeing, but the ones that took the other side done before the others choose (the
/// reference checks running invocations only), and the same where they are not done yet.
///
/// vyre's validator refuses a barrier under a condition it cannot prove uniform (V010),
/// but it keeps a variable uniform when a data-dependent branch assigns it a uniform
/// value: the condition is such a flag (`c = 0; if cond { c = 1 }; if c == 1 {..}`).
fn barrier_in_data_dependent_branch(workgroup: u32) -> Vec<Case> {
    let flag = |cond: Expr| {
        vec![
            Node::let_bind("c", u(0)),
            Node::if_then(cond, vec![Node::assign("c", u(1))]),
        ]
    };
    let branch = || {
        Node::if_then_else(
            bin(BinOp::Eq, var("c"), u(1)),
            vec![
                Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                Node::store("out", gid(), add(var("g"), u(1))),
            ],
            vec![Node::store("out", gid(), add(var("g"), u(2)))],
        )
    };
    let below = |bound: u32| bin(BinOp::Lt, var("lin"), u(bound));
    let with = |cond: Expr| {
        let mut body = unequal_branch();
        body.extend(flag(cond));
        body.push(branch());
        body
    };
    // The lanes with `lin % 8 == 0` spend `slow` iterations before the branch; the
    // others take its other side and finish first.
    let late = |slow: u32| {
        let mut body = unequal_branch();
        body.push(Node::if_then(
            modulo_is(var("lin"), 8, 0),
            vec![Node::loop_for(
                "j",
                u(0),
                u(slow),
                vec![Node::let_bind("t", var("j"))],
            )],
        ));
        body.extend(flag(modulo_is(var("lin"), 8, 0)));
        body.push(branch());
        body
    };
    vec![
        case(
            "barrier in a data-dependent branch every lane takes",
            workgroup,
            with(below(workgroup)),
        ),
        case(
            "barrier in a branch lanes of a warp disagree on",
            workgroup,
            with(below(5)),
        )
        .failing(),
        case(
            "barrier in a branch the workgroup's warps disagree on",
            workgroup,
            with(below(32)),
        )
        .failing(),
        padded(
            "barrier in a branch its other side's lanes left before",
            workgroup,
            late(20),
        ),
        padded(
            "barrier in a branch its other side's lanes are still at",
            workgroup,
            late(0),
        )
        .failing(),
        case(
            "barrier loop in a data-dependent branch every lane takes",
            workgroup,
            barrier_loop_in_branch(true, below(workgroup)),
        ),
        case(
            "barrier loop in a data-dependent branch lanes disagree on",
            workgroup,
            barrier_loop_in_branch(true, below(7)),
        )
        .failing(),
        // Without a subgroup operation the segment runs as a step machine all the same.
        case(
            "no subgroup operation: barrier loop in a data-dependent branch every lane takes",
            workgroup,
            barrier_loop_in_branch(false, below(workgroup + 1)),
        ),
        case(
            "no subgroup operation: barrier loop in a data-dependent branch lanes disagree on",
            workgroup,
            barrier_loop_in_branch(false, below(workgroup - 1)),
        )
        .failing(),
    ]
}

/// `c = 0; if cond { c = 1 }; if c == 1 { k = 3; loop j in 0..k { barrier; y += j } }`
/// (vyre's validator takes `k` for uniform, and so the loop's bounds), after a step
/// machine's subgroup operation or none.
fn barrier_loop_in_branch(subgroup: bool, cond: Expr) -> Vec<Node> {
    let mut body = match subgroup {
        true => unequal_branch(),
        false => vec![Node::let_bind("g", var("v"))],
    };
    body.extend([
        Node::let_bind("c", u(0)),
        Node::if_then(cond, vec![Node::assign("c", u(1))]),
        Node::let_bind("y", var("g")),
        Node::if_then(
            bin(BinOp::Eq, var("c"), u(1)),
            vec![
                Node::let_bind("k", u(3)),
                Node::loop_for(
                    "j",
                    u(0),
                    var("k"),
                    vec![
                        Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                        Node::assign("y", add(var("y"), var("j"))),
                    ],
                ),
            ],
        ),
        Node::store("out", gid(), var("y")),
    ]);
    body
}

/// Lanes with `v % 3 == 0` take three statements more; `x` changes there.
fn unequal_branch() -> Vec<Node> {
    vec![
        Node::let_bind("x", var("v")),
        Node::if_then(
            modulo_is(var("v"), 3, 0),
            vec![
                Node::let_bind("t", u(1)),
                Node::let_bind("w", u(2)),
                Node::assign("x", add(var("x"), u(7))),
            ],
        ),
        Node::let_bind("g", sum(var("x"))),
        Node::store("out", gid(), var("g")),
    ]
}

/// Lanes iterate 0..3 times; each iteration reads every lane's accumulator, wherever it is.
fn loop_reduce() -> Vec<Node> {
    vec![
        Node::let_bind("acc", var("v")),
        Node::loop_for(
            "i",
            u(0),
            rem(var("v"), 4),
            vec![Node::assign(
                "acc",
                add(var("acc"), rem(sum(rem(var("acc"), 100)), 1000)),
            )],
        ),
        Node::store("out", gid(), var("acc")),
    ]
}

fn loop_ballot() -> Vec<Node> {
    vec![
        Node::let_bind("c", var("lin")),
        Node::loop_for(
            "i",
            u(0),
            rem(var("v"), 5),
            vec![
                Node::assign(
                    "c",
                    add(var("c"), rem(ballot(modulo_is(var("c"), 3, 0)), 7)),
                ),
                Node::let_bind("d", shuffle(var("c"), rem(add(var("lin"), u(1)), 32))),
                Node::assign("c", add(var("c"), rem(var("d"), 5))),
            ],
        ),
        Node::store("out", gid(), var("c")),
    ]
}

fn cast(target: DataType, value: Expr) -> Expr {
    Expr::Cast {
        target,
        value: Box::new(value),
    }
}

/// The low word of 16-byte value `wide`, the reference's way: its first eight bytes as a
/// u64, then that as a u32.
fn low_word(wide: Expr) -> Expr {
    cast(
        DataType::U32,
        cast(DataType::U64, cast(DataType::Vec2U32, wide)),
    )
}

/// A Vec4U32 variable that a subgroup operand reads, assigned in a data-dependent loop
/// (one register pair in the step machine, whichever binding).
fn wide_in_loop() -> Vec<Node> {
    vec![
        Node::let_bind("w", cast(DataType::Vec4U32, var("lin"))),
        Node::loop_for(
            "i",
            u(0),
            rem(var("v"), 3),
            vec![
                Node::assign("w", cast(DataType::Vec4U32, add(var("v"), var("i")))),
                Node::let_bind("g", sum(low_word(var("w")))),
                Node::store("out", gid(), var("g")),
            ],
        ),
        Node::let_bind("h", ballot(var("w"))),
        Node::store("out", gid(), add(low_word(var("w")), rem(var("h"), 5))),
    ]
}

/// Lanes that return keep the Vec4U32 they held; the others' shuffle reads it.
fn wide_after_return() -> Vec<Node> {
    vec![
        Node::let_bind("w", cast(DataType::Vec4U32, mul3(var("v")))),
        Node::if_then(modulo_is(var("v"), 4, 0), vec![Node::Return]),
        Node::assign("w", cast(DataType::Vec4U32, add(var("v"), u(1)))),
        Node::let_bind(
            "g",
            shuffle(low_word(var("w")), rem(add(var("lin"), u(5)), 32)),
        ),
        Node::store("out", gid(), var("g")),
    ]
}

fn mul3(value: Expr) -> Expr {
    bin(BinOp::Mul, value, u(3))
}

/// Returned lanes keep the accumulator they held at their `Return`.
fn return_in_loop() -> Vec<Node> {
    vec![
        Node::let_bind("s", var("v")),
        Node::loop_for(
            "i",
            u(0),
            u(6),
            vec![
                Node::if_then(
                    bin(BinOp::Eq, rem(add(var("v"), var("i")), 5), u(0)),
                    vec![Node::Return],
                ),
                Node::assign(
                    "s",
                    add(
                        var("s"),
                        rem(shuffle(var("s"), rem(add(var("lin"), u(3)), 32)), 11),
                    ),
                ),
            ],
        ),
        Node::store("out", gid(), var("s")),
    ]
}

/// Lanes loop 2..5 times and some return on the way; the others read the returned lanes'
/// variables as they were at their `Return`.
fn return_in_data_dependent_loop() -> Vec<Node> {
    vec![
        Node::let_bind("s", var("lin")),
        Node::loop_for(
            "i",
            u(0),
            add(rem(var("v"), 4), u(2)),
            vec![
                Node::if_then(
                    bin(BinOp::Eq, rem(add(var("v"), var("i")), 6), u(0)),
                    vec![Node::Return],
                ),
                Node::assign(
                    "s",
                    add(
                        var("s"),
                        rem(reduce(SubgroupReduceOp::Min, add(var("s"), var("v"))), 13),
                    ),
                ),
            ],
        ),
        Node::store("out", gid(), var("s")),
    ]
}

fn after_loop() -> Vec<Node> {
    vec![
        Node::let_bind("z", add(bin(BinOp::Mul, var("lin"), u(3)), var("v"))),
        Node::loop_for("i", u(0), rem(var("v"), 5), vec![]),
        Node::let_bind("g", sum(var("z"))),
        Node::store("out", gid(), var("g")),
    ]
}

/// The operand loads `out`, which the lanes store to: the reference's later lanes see the
/// earlier lanes' stores of the same round.
fn serial_round() -> Vec<Node> {
    vec![
        Node::store("out", gid(), var("v")),
        Node::loop_for(
            "i",
            u(0),
            add(rem(var("v"), 3), u(1)),
            vec![Node::store(
                "out",
                gid(),
                add(rem(sum(Expr::load("out", gid())), 1000), var("i")),
            )],
        ),
    ]
}

/// A barrier in a loop every lane runs the same number of times, after a branch of
/// unequal length: the warp releases its lanes together.
fn barrier_loop() -> Vec<Node> {
    vec![
        Node::let_bind("x", var("lin")),
        Node::loop_for(
            "k",
            u(0),
            u(3),
            vec![
                Node::if_then(
                    modulo_is(add(var("v"), var("k")), 2, 0),
                    vec![
                        Node::let_bind("y", u(2)),
                        Node::assign("x", add(var("x"), var("y"))),
                    ],
                ),
                Node::let_bind("g", sum(var("x"))),
                Node::assign("x", rem(add(var("x"), var("g")), 1000)),
                Node::barrier_with_ordering(MemoryOrdering::SeqCst),
            ],
        ),
        Node::store("out", gid(), var("x")),
    ]
}

fn nested_loops() -> Vec<Node> {
    vec![
        Node::let_bind("p", u(1)),
        Node::loop_for(
            "i",
            u(0),
            rem(var("v"), 3),
            vec![Node::loop_for(
                "j",
                u(0),
                rem(add(var("v"), var("i")), 4),
                vec![
                    Node::if_then(modulo_is(add(var("v"), var("j")), 7, 0), vec![Node::Return]),
                    Node::assign(
                        "p",
                        rem(add(var("p"), reduce(SubgroupReduceOp::Max, var("p"))), 997),
                    ),
                ],
            )],
        ),
        Node::store("out", gid(), var("p")),
    ]
}

/// Lanes with `v % 4 == 0` bind `y` two steps late: the others' operands read it unbound
/// then, and the reference fails.
fn bound_late() -> Vec<Node> {
    vec![
        Node::if_then(
            modulo_is(var("v"), 4, 0),
            vec![Node::let_bind("t", u(1)), Node::let_bind("w", u(1))],
        ),
        Node::let_bind("y", var("lin")),
        Node::let_bind("g", sum(var("y"))),
        Node::store("out", gid(), var("g")),
    ]
}

/// An f32 fold, lane 0 upward, over accumulators at different iterations.
fn f32_fold_in_loop() -> Case {
    let (workgroup, n) = (48, 96);
    let trips = rem(
        Expr::Cast {
            target: DataType::U32,
            value: Box::new(var("v")),
        },
        3,
    );
    let body = vec![
        Node::let_bind("acc", var("v")),
        Node::loop_for(
            "i",
            u(0),
            trips,
            vec![Node::assign(
                "acc",
                add(var("acc"), sum(bin(BinOp::Mul, var("acc"), Expr::f32(0.5)))),
            )],
        ),
        Node::store("out", gid(), var("acc")),
        Node::barrier_with_ordering(MemoryOrdering::SeqCst),
    ];
    let inputs = (0..n)
        .map(|i| ((i * 37 + 11) % 97) as f32 * 0.25 + 0.125)
        .collect::<Vec<_>>();
    Case::new(
        format!("step machine: f32 fold in a data-dependent loop, workgroup {workgroup}"),
        lanes(DataType::F32, n, n, workgroup, body),
        vec![f32_bytes(&inputs)],
    )
}

/// An atomic in a subgroup operand runs once for every lane of the subgroup each time a
/// lane evaluates the operation (the reference evaluates every lane's operand on the
/// memory it shares), lane 0 upward, after the real atomics of the lanes before it in the
/// round. One warp (the reference interleaves the warps of a workgroup round by round,
/// which independent warps touching the same counters would not reproduce).
/// Subgroup operations nested in an operand with two atomics on one buffer: the reference
/// evaluates the outer operand lane by lane and, within each lane's evaluation, the nested
/// operation whole (every lane's operand, its own atomics in lane order) on the memory
/// that lane's atomics so far left. Appended after every other semantic case.
pub fn nested_operand_cases() -> Vec<Case> {
    let load_c = |index: Expr| Expr::load("c", index);
    vec![
        counters_case(
            "a reduce between two atomics on one buffer, in a reduce operand",
            |atomic| {
                sum(add(
                    add(atomic(u(0), u(1)), sum(load_c(rem(var("lin"), 4)))),
                    atomic(u(0), var("v")),
                ))
            },
        ),
        counters_case(
            "a reduce over two atomics on one buffer, in a ballot",
            |atomic| {
                ballot(bin(
                    BinOp::Lt,
                    rem(sum(add(atomic(u(1), u(1)), atomic(u(1), var("v")))), 64),
                    u(32),
                ))
            },
        ),
        counters_case(
            "a ballot and an atomic in a shuffle's value, an atomic in its lane",
            |atomic| {
                shuffle(
                    bin(
                        BinOp::BitXor,
                        atomic(u(2), u(5)),
                        add(
                            ballot(bin(BinOp::Lt, load_c(u(2)), u(400))),
                            atomic(u(2), var("v")),
                        ),
                    ),
                    rem(add(var("lin"), atomic(u(3), u(1))), 32),
                )
            },
        ),
        counters_case(
            "a shuffle of an atomic, nested twice, between two atomics",
            |atomic| {
                sum(add(
                    atomic(u(0), u(3)),
                    add(
                        shuffle(
                            add(sum(load_c(u(0))), atomic(u(1), u(2))),
                            rem(add(var("lin"), u(1)), 32),
                        ),
                        atomic(u(0), var("lin")),
                    ),
                ))
            },
        ),
    ]
}

/// A branch on a condition known before the run, right after a subgroup operation whose
/// result it anchors, whose taken side does nothing (the kernel ends there) and whose other
/// side stores: a literal condition, and an 8-byte raw value's truthiness (true whatever
/// its bytes), both through the opaque zero since v34 (`checks::hide_constant`). (The
/// shape ptxas 12.9-13.0 miscompiled for sm_90 is the saved fuzz case
/// `gpu-error-constant-branch-after-a-ballot-takes-the-other-side.case`; these two compile
/// correctly either way.) Appended after every other case.
pub fn constant_branch_after_subgroup_cases() -> Vec<Case> {
    let workgroup = 16;
    let branch = |cond: Expr| {
        vec![
            Node::let_bind("g", ballot(bin(BinOp::Lt, var("v"), u(500)))),
            Node::if_then_else(cond, vec![], vec![Node::store("out", gid(), u(7))]),
        ]
    };
    let literal = Case::new(
        "literal-true branch after a ballot, workgroup 16",
        lanes(
            DataType::U32,
            32,
            32,
            workgroup,
            branch(Expr::LitBool(true)),
        ),
        vec![values(32)],
    );
    let mut body = vec![
        Node::let_bind("lin", Expr::LocalId { axis: 0 }),
        Node::let_bind("v", Expr::load("a", gid())),
    ];
    let wide = Expr::Cast {
        target: DataType::Bool,
        value: Box::new(Expr::load("w", gid())),
    };
    body.extend(branch(wide));
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(32),
            BufferDecl::output("out", 1, DataType::U32).with_count(32),
            BufferDecl::read("w", 2, DataType::I64).with_count(4),
        ],
        [workgroup, 1, 1],
        body,
    );
    let truthy = Case::new(
        "branch on an 8-byte load's truthiness after a ballot, workgroup 16",
        program,
        vec![values(32), vec![0; 32]],
    );
    vec![literal, truthy]
}

fn atomic_in_operand() -> Case {
    counters_case("atomic in a subgroup operand", |atomic| {
        sum(atomic(rem(var("lin"), 4), var("v")))
    })
}

/// One warp of 32 lanes that add to the counters `c` in a data-dependent loop (so that
/// the segment runs as a step machine), then store the subgroup operation `operand`
/// builds from `atomic(index, value)` (an atomic add on `c`). With two atomics on one
/// buffer in one operand the reference runs both of a lane before the next lane's (the
/// step machine's lane turns, `put_lane_operand`).
fn counters_case(name: &str, operand: impl Fn(&dyn Fn(Expr, Expr) -> Expr) -> Expr) -> Case {
    let (workgroup, n) = (32, 32);
    let atomic = |index: Expr, value: Expr| Expr::Atomic {
        op: AtomicOp::Add,
        buffer: "c".into(),
        index: Box::new(index),
        expected: None,
        value: Box::new(value),
        ordering: MemoryOrdering::Relaxed,
    };
    let body = vec![
        Node::let_bind("lin", Expr::LocalId { axis: 0 }),
        Node::let_bind("v", Expr::load("a", gid())),
        Node::loop_for(
            "i",
            u(0),
            rem(var("v"), 3),
            vec![Node::let_bind("t", atomic(rem(var("lin"), 4), u(1)))],
        ),
        Node::let_bind("g", operand(&atomic)),
        Node::store("out", gid(), var("g")),
        Node::barrier_with_ordering(MemoryOrdering::SeqCst),
    ];
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::output("out", 1, DataType::U32).with_count(n),
            BufferDecl::read_write("c", 2, DataType::U32).with_count(4),
        ],
        [workgroup, 1, 1],
        body,
    );
    Case::new(
        format!("step machine: {name}, workgroup {workgroup}"),
        program,
        vec![values(n), u32_bytes(&[10, 20, 30, 40])],
    )
}

/// Bytes loads as subgroup operands where lanes read one another at different steps: a
/// returned lane's view variable is the view it held at its `Return`, a step machine's the
/// lane's own binding (a serial round's: the round-start one). A ballot takes each lane's
/// truthiness, a shuffle lane its u32 reading (a view of more than four bytes fails), a
/// shuffled view fails where the operation runs. `b` is 37 bytes ending `[0, 4, 0, 0, 0]`:
/// views from 32 are 5 bytes (truthy, no u32 reading), from 33 `[4, 0, 0, 0]`, then zeros.
pub fn bytes_operand_round_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for workgroup in WORKGROUPS {
        cases.push(bytes_case(
            "view variables of returned lanes",
            workgroup,
            views_after_return(),
        ));
        cases.push(bytes_case(
            "view variable in a data-dependent loop",
            workgroup,
            views_in_loop(),
        ));
        cases.push(bytes_case(
            "view variable in a round reading a written buffer",
            workgroup,
            views_in_serial_round(),
        ));
    }
    cases.push(
        bytes_case(
            "shuffled view variable in a data-dependent loop fails",
            64,
            vec![
                Node::let_bind("x", view(u(0))),
                Node::loop_for(
                    "i",
                    u(0),
                    rem(var("v"), 3),
                    vec![
                        Node::assign("x", view(tail_offset(add(var("v"), var("i"))))),
                        Node::store("out", gid(), shuffle(var("x"), u(0))),
                    ],
                ),
            ],
        )
        .failing(),
    );
    cases.push(
        bytes_case(
            "long view as a returned lane's shuffle lane fails",
            64,
            vec![
                Node::let_bind("x", view(u(0))),
                Node::if_then(modulo_is(var("v"), 4, 0), vec![Node::Return]),
                Node::assign("x", view(u(36))),
                Node::store("out", gid(), shuffle(var("lin"), var("x"))),
            ],
        )
        .failing(),
    );
    cases
}

/// The rest of `b` from byte `index`.
fn view(index: Expr) -> Expr {
    Expr::load("b", index)
}

/// A byte offset of `b` from 30 to 36, by `value`: views of 7 to 1 bytes.
fn tail_offset(value: Expr) -> Expr {
    add(u(30), rem(value, 7))
}

fn bytes_case(name: &str, workgroup: u32, mut body: Vec<Node>) -> Case {
    body.push(Node::barrier_with_ordering(MemoryOrdering::SeqCst));
    let n = workgroup * 2;
    let entry = with_lane_ids(body);
    let source = bytes_tail_source();
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            bytes_in("b", 1, source.len() as u32),
            BufferDecl::read_write("out", 2, DataType::U32).with_count(n),
        ],
        [workgroup, 1, 1],
        entry,
    );
    let zeros = vec![0u8; n as usize * 4];
    Case::new(
        format!("bytes operands in rounds: {name}, workgroup {workgroup}"),
        program,
        vec![values(n), source, zeros],
    )
}

/// Lanes with `v % 4 == 0` return holding `x` (a view of 7..1 bytes); the others move
/// theirs on; every lane's view meets the ballot and the shuffle lane.
fn views_after_return() -> Vec<Node> {
    vec![
        Node::let_bind("x", view(tail_offset(var("v")))),
        Node::let_bind("y", view(add(u(33), rem(var("lin"), 4)))),
        Node::if_then(modulo_is(var("v"), 4, 0), vec![Node::Return]),
        Node::assign("x", view(tail_offset(add(var("v"), u(3))))),
        Node::let_bind("g", ballot(var("x"))),
        Node::let_bind("s", shuffle(mul3(var("lin")), var("y"))),
        Node::store("out", gid(), add(rem(var("g"), 1000), var("s"))),
    ]
}

/// Lanes iterate 0..3 times, moving their views each time; every iteration's ballot and
/// shuffle read every lane's current views, wherever the lane is.
fn views_in_loop() -> Vec<Node> {
    vec![
        Node::let_bind("x", view(tail_offset(var("lin")))),
        Node::let_bind("y", view(u(36))),
        Node::let_bind("acc", var("v")),
        Node::loop_for(
            "i",
            u(0),
            rem(var("v"), 4),
            vec![
                Node::assign("x", view(tail_offset(add(var("acc"), var("i"))))),
                Node::assign("y", view(add(u(33), rem(var("acc"), 4)))),
                Node::assign(
                    "acc",
                    add(
                        var("acc"),
                        add(rem(ballot(var("x")), 97), shuffle(var("lin"), var("y"))),
                    ),
                ),
            ],
        ),
        Node::store("out", gid(), var("acc")),
    ]
}

/// A subgroup operand loads `out`, which the lanes store to: the lanes take their steps in
/// turn, each operand reading the round-start views.
fn views_in_serial_round() -> Vec<Node> {
    vec![
        Node::store("out", gid(), var("v")),
        Node::let_bind("x", view(tail_offset(var("v")))),
        Node::loop_for(
            "i",
            u(0),
            add(rem(var("v"), 3), u(1)),
            vec![
                Node::store(
                    "out",
                    gid(),
                    add(
                        rem(sum(Expr::load("out", gid())), 1000),
                        rem(ballot(var("x")), 89),
                    ),
                ),
                Node::assign("x", view(tail_offset(add(var("v"), var("i"))))),
            ],
        ),
    ]
}

/// A barrier in a branch whose other side's lanes run off the program's end around the
/// round the barrier's lanes choose: the reference counts a lane that ran off the end as
/// running one round more (it pops its root frame then), so its history still counts in
/// the check after its last statement's round
/// (`tests/fuzz_regressions/gpu-missed-error-divergent-barrier-lane-done-a-round-after-its-last-step.case`).
/// The lanes with `lin % 8 == 0` bind `pad` variables before the flag and take the
/// barrier; the others take the other side and finish: with 2 they are in their last
/// round when the barrier's lanes choose (the reference fails), with 3 done (it runs).
/// With and without a subgroup operation before (a step machine either way).
pub fn finishing_lane_barrier_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for workgroup in WORKGROUPS {
        for subgroup in [false, true] {
            let what = match subgroup {
                true => "after a subgroup sum",
                false => "no subgroup operation",
            };
            cases.push(
                padded(
                    &format!(
                        "{what}: barrier branch chosen in the round its other side's lanes finish"
                    ),
                    workgroup,
                    finishing_lanes(subgroup, 2),
                )
                .failing(),
            );
            cases.push(padded(
                &format!(
                    "{what}: barrier branch chosen a round after its other side's lanes finished"
                ),
                workgroup,
                finishing_lanes(subgroup, 3),
            ));
        }
    }
    cases
}

fn finishing_lanes(subgroup: bool, pad: u32) -> Vec<Node> {
    let slow = || modulo_is(var("lin"), 8, 0);
    let mut body = Vec::new();
    if subgroup {
        body.push(Node::let_bind("g", sum(var("v"))));
    }
    body.push(Node::if_then(
        slow(),
        (0..pad)
            .map(|i| Node::let_bind(format!("p{i}"), u(i)))
            .collect(),
    ));
    body.push(Node::let_bind("c", u(0)));
    body.push(Node::if_then(slow(), vec![Node::assign("c", u(1))]));
    body.push(Node::if_then_else(
        bin(BinOp::Eq, var("c"), u(1)),
        vec![
            Node::barrier_with_ordering(MemoryOrdering::SeqCst),
            Node::store("out", gid(), add(var("v"), u(1))),
        ],
        vec![Node::store("out", gid(), add(var("v"), u(2)))],
    ));
    body
}
