//! Subgroup operations after an early `Return` (issue 17): the reference still evaluates
//! the operand of every lane of the subgroup, a returned lane with the variables it held
//! at its `Return`; and subgroup operands whose faults count for the whole subgroup.
//! Workgroups of 64 (full subgroups), 48 and 40 (a short last subgroup of 16 or 8).
//! Appended after every other semantic case, so the PTX snapshot names
//! (`semantic-<index>-...`) of the cases before them stay put.

#![allow(dead_code)]

use super::gpu::{f32_bytes, u32_bytes};
use super::programs::Case;
use vyre_foundation::ir::{
    BinOp, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program, SubgroupReduceOp,
};

pub(super) fn gid() -> Expr {
    Expr::InvocationId { axis: 0 }
}

pub(super) fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

pub(super) fn var(name: &str) -> Expr {
    Expr::var(name)
}

pub(super) fn u(value: u32) -> Expr {
    Expr::u32(value)
}

/// `a % m == r`.
pub(super) fn modulo_is(a: Expr, m: u32, r: u32) -> Expr {
    bin(BinOp::Eq, bin(BinOp::Mod, a, u(m)), u(r))
}

pub(super) fn reduce(op: SubgroupReduceOp, value: Expr) -> Expr {
    Expr::SubgroupReduce {
        op,
        value: Box::new(value),
    }
}

pub(super) fn shuffle(value: Expr, lane: Expr) -> Expr {
    Expr::SubgroupShuffle {
        value: Box::new(value),
        lane: Box::new(lane),
    }
}

pub(super) fn ballot(cond: Expr) -> Expr {
    Expr::SubgroupBallot {
        cond: Box::new(cond),
    }
}

pub(super) fn returns_if(cond: Expr) -> Node {
    Node::if_then(cond, vec![Node::Return])
}

/// `lin` (the linear local id) and `v = a[gid]` bound, then `body`; `n` invocations in
/// groups of `workgroup`; `a` and `out` of `ty`, `out` of `out_count` elements.
pub(super) fn lanes(
    ty: DataType,
    n: u32,
    out_count: u32,
    workgroup: u32,
    body: Vec<Node>,
) -> Program {
    let entry = with_lane_ids(body);
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, ty.clone()).with_count(n),
            BufferDecl::output("out", 1, ty).with_count(out_count),
        ],
        [workgroup, 1, 1],
        entry,
    )
}

/// `lin` (the linear local id) and `v = a[gid]` bound, then `body`.
pub(super) fn with_lane_ids(body: Vec<Node>) -> Vec<Node> {
    let mut entry = vec![
        Node::let_bind("lin", Expr::LocalId { axis: 0 }),
        Node::let_bind("v", Expr::load("a", gid())),
    ];
    entry.extend(body);
    entry
}

/// Values 1..=997 in a fixed scatter (every residue class mod 2..8 occurs per subgroup).
pub(super) fn values(n: u32) -> Vec<u8> {
    u32_bytes(&(0..n).map(|i| (i * 37 + 11) % 997 + 1).collect::<Vec<_>>())
}

const WORKGROUPS: [u32; 3] = [64, 48, 40];

/// Every subgroup case.
pub fn subgroup_return_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for workgroup in WORKGROUPS {
        cases.extend(after_return(workgroup));
    }
    cases.extend(reduce_ops_after_return());
    cases.extend(f32_order_after_return());
    cases.extend(returns_in_loops());
    cases.extend(loops_in_branches());
    cases.extend(returned_lane_faults());
    cases.extend(operand_faults());
    cases.extend(barrier_after_return());
    cases.extend(lane_kinds());
    cases
}

/// Reduce, ballot and shuffle after a data-dependent `Return` taken by some, all or no
/// lanes; the returned lanes' outputs stay zero. `out` has room for a second result per
/// lane.
fn after_return(workgroup: u32) -> Vec<Case> {
    let n = workgroup * 2;
    let some = || returns_if(modulo_is(var("v"), 3, 0));
    let store = |value: Expr| Node::store("out", gid(), value);
    let add = |value: Expr| reduce(SubgroupReduceOp::Add, value);
    let program = |body: Vec<Node>| lanes(DataType::U32, n, 2 * n, workgroup, body);
    let case = |name: &str, body: Vec<Node>| {
        Case::new(
            format!("{name} after Return, workgroup {workgroup}"),
            program(body),
            vec![values(n)],
        )
    };
    vec![
        case(
            "subgroup reduce over returned lanes",
            vec![some(), store(add(var("v")))],
        ),
        case(
            "subgroup ballot over returned lanes",
            vec![
                returns_if(modulo_is(var("lin"), 5, 1)),
                store(ballot(modulo_is(var("v"), 2, 1))),
            ],
        ),
        case(
            "subgroup shuffle from returned lanes",
            vec![
                returns_if(modulo_is(var("lin"), 2, 1)),
                store(shuffle(var("v"), bin(BinOp::BitXor, var("lin"), u(1)))),
            ],
        ),
        case(
            "subgroup shuffle past the short subgroup",
            vec![
                some(),
                store(shuffle(var("v"), bin(BinOp::Add, var("lin"), u(20)))),
            ],
        ),
        case(
            "subgroup reduce when every lane returned",
            vec![
                returns_if(bin(BinOp::Ne, var("v"), u(0))),
                store(add(var("v"))),
            ],
        ),
        case(
            "subgroup reduce when no lane returned",
            vec![
                returns_if(bin(BinOp::Eq, var("v"), u(0))),
                store(add(var("v"))),
            ],
        ),
        case(
            "subgroup reduce of a value assigned before Return",
            vec![
                Node::let_bind("x", var("v")),
                Node::if_then(
                    modulo_is(var("v"), 5, 0),
                    vec![
                        Node::assign("x", bin(BinOp::Add, bin(BinOp::Mul, var("x"), u(3)), u(1))),
                        Node::Return,
                    ],
                ),
                Node::assign("x", bin(BinOp::Add, var("x"), u(1000))),
                store(add(var("x"))),
            ],
        ),
        case(
            "subgroup ops around a Return inside a branch",
            vec![
                Node::if_then(
                    modulo_is(var("v"), 2, 0),
                    vec![
                        returns_if(modulo_is(var("v"), 4, 0)),
                        store(ballot(modulo_is(var("v"), 8, 2))),
                    ],
                ),
                // Lanes that skipped the branch run three steps ahead: they must not
                // close the scope of `v` (the region's end) before the others have
                // evaluated this; one statement more than the two here would be needed
                // without `pad`.
                Node::let_bind("w", add(bin(BinOp::Mul, var("v"), var("lin")))),
                Node::store("out", bin(BinOp::Add, gid(), u(n)), var("w")),
                Node::let_bind("pad", u(0)),
            ],
        ),
    ]
}

/// Every u32 reduction operator over lanes some of which returned (48-lane groups).
fn reduce_ops_after_return() -> Vec<Case> {
    let (workgroup, n) = (48, 96);
    [
        SubgroupReduceOp::Mul,
        SubgroupReduceOp::Min,
        SubgroupReduceOp::Max,
        SubgroupReduceOp::And,
        SubgroupReduceOp::Or,
        SubgroupReduceOp::Xor,
    ]
    .into_iter()
    .map(|op| {
        Case::new(
            format!("subgroup reduce {op:?} u32 over returned lanes, workgroup {workgroup}"),
            lanes(
                DataType::U32,
                n,
                n,
                workgroup,
                vec![
                    returns_if(modulo_is(var("lin"), 4, 3)),
                    Node::store(
                        "out",
                        gid(),
                        reduce(op, bin(BinOp::BitOr, var("v"), u(0x100))),
                    ),
                ],
            ),
            vec![values(n)],
        )
    })
    .collect()
}

/// f32 reductions fold lane 0 upward, returned lanes included: large and small values
/// that cancel differently in any other order.
fn f32_order_after_return() -> Vec<Case> {
    let mut cases = Vec::new();
    for workgroup in WORKGROUPS {
        let n = workgroup * 2;
        let data: Vec<f32> = (0..n)
            .map(|i| match i % 32 {
                0 => 1e8,
                7 => -1e8,
                31 => 3e7,
                k => 1.0 + k as f32 / 8.0,
            })
            .collect();
        for op in [
            SubgroupReduceOp::Add,
            SubgroupReduceOp::Mul,
            SubgroupReduceOp::Min,
            SubgroupReduceOp::Max,
        ] {
            cases.push(Case::new(
                format!("subgroup reduce {op:?} f32 over returned lanes, workgroup {workgroup}"),
                lanes(
                    DataType::F32,
                    n,
                    n,
                    workgroup,
                    vec![
                        returns_if(modulo_is(var("lin"), 4, 3)),
                        Node::store("out", gid(), reduce(op, var("v"))),
                    ],
                ),
                vec![f32_bytes(&data)],
            ));
        }
    }
    cases
}

/// Lanes returning in different iterations of a uniform loop: a returned lane keeps the
/// loop variable of its last iteration.
fn returns_in_loops() -> Vec<Case> {
    let mut cases = Vec::new();
    for workgroup in [64, 40] {
        let n = workgroup * 2;
        let accumulate = |value: Expr| Node::assign("acc", bin(BinOp::Add, var("acc"), value));
        let body = vec![
            Node::let_bind("acc", u(0)),
            Node::loop_for(
                "i",
                u(0),
                u(4),
                vec![
                    returns_if(bin(BinOp::Eq, bin(BinOp::Mod, var("v"), u(6)), var("i"))),
                    accumulate(reduce(
                        SubgroupReduceOp::Add,
                        bin(BinOp::Mul, var("v"), bin(BinOp::Add, var("i"), u(1))),
                    )),
                    accumulate(ballot(bin(
                        BinOp::Gt,
                        var("v"),
                        bin(BinOp::Mul, var("i"), u(250)),
                    ))),
                ],
            ),
            Node::store("out", gid(), var("acc")),
        ];
        cases.push(Case::new(
            format!("subgroup ops in a loop lanes return from, workgroup {workgroup}"),
            lanes(DataType::U32, n, n, workgroup, body),
            vec![values(n)],
        ));
    }
    cases
}

/// Operations over time-invariant operands in loops inside data-dependent branches and in
/// data-dependent loops, computed once before the construct: the reference evaluates them
/// in every iteration of the lanes running it, with the same result. Enough statements
/// follow for no lane to leave the region before the slowest has evaluated the last one.
fn loops_in_branches() -> Vec<Case> {
    let mut cases = Vec::new();
    for workgroup in [64, 48] {
        let n = workgroup * 2;
        let padding = (0..10).map(|i| Node::let_bind(format!("pad{i}"), u(i)));
        let iterations = bin(BinOp::Min, bin(BinOp::Mod, var("v"), u(5)), u(3));
        let mut in_branch = vec![Node::if_then(
            modulo_is(var("v"), 3, 1),
            vec![Node::loop_for(
                "i",
                u(0),
                u(3),
                vec![Node::store(
                    "out",
                    gid(),
                    bin(
                        BinOp::BitXor,
                        ballot(bin(BinOp::Gt, var("v"), u(500))),
                        var("i"),
                    ),
                )],
            )],
        )];
        in_branch.extend(padding.clone());
        let mut data_dependent = vec![Node::loop_for(
            "i",
            u(0),
            iterations,
            vec![Node::store(
                "out",
                gid(),
                bin(
                    BinOp::Add,
                    reduce(SubgroupReduceOp::Max, bin(BinOp::Mul, var("v"), var("lin"))),
                    var("i"),
                ),
            )],
        )];
        data_dependent.extend(padding);
        cases.push(Case::new(
            format!("subgroup ballot in a loop inside a branch, workgroup {workgroup}"),
            lanes(DataType::U32, n, n, workgroup, in_branch),
            vec![values(n)],
        ));
        cases.push(Case::new(
            format!("subgroup reduce in a data-dependent loop, workgroup {workgroup}"),
            lanes(DataType::U32, n, n, workgroup, data_dependent),
            vec![values(n)],
        ));
    }
    cases
}

/// A returned lane that never bound the variable an operand reads: the reference fails to
/// evaluate its operand (and runs when no lane returned).
fn returned_lane_faults() -> Vec<Case> {
    let (workgroup, n) = (48, 96);
    let body = |returning: Expr| {
        vec![
            returns_if(returning),
            Node::let_bind("y", bin(BinOp::Mul, var("v"), u(2))),
            Node::store("out", gid(), reduce(SubgroupReduceOp::Add, var("y"))),
        ]
    };
    // The lane index of a returned lane is not a u32: the shuffle fails for the subgroup.
    let lane = Expr::Select {
        cond: Box::new(modulo_is(var("v"), 2, 0)),
        true_val: Box::new(Expr::i32(-1)),
        false_val: Box::new(Expr::i32(1)),
    };
    let bad_lane = vec![
        Node::let_bind("l", lane),
        returns_if(modulo_is(var("v"), 2, 0)),
        Node::store("out", gid(), shuffle(var("v"), var("l"))),
    ];
    vec![
        Case::new(
            "subgroup reduce of a variable returned lanes never bound",
            lanes(
                DataType::U32,
                n,
                n,
                workgroup,
                body(modulo_is(var("lin"), 7, 0)),
            ),
            vec![values(n)],
        )
        .failing(),
        Case::new(
            "subgroup reduce of a variable bound after a Return no lane takes",
            lanes(
                DataType::U32,
                n,
                n,
                workgroup,
                body(bin(BinOp::Eq, var("v"), u(0))),
            ),
            vec![values(n)],
        ),
        Case::new(
            "subgroup shuffle whose returned lanes hold a negative lane",
            lanes(DataType::U32, n, n, workgroup, bad_lane),
            vec![values(n)],
        )
        .failing(),
    ]
}

/// An operand fault inside a data-dependent branch counts only when a lane reaches the
/// operation, and then for the whole subgroup.
fn operand_faults() -> Vec<Case> {
    let (workgroup, n) = (64, 128);
    let negative_lane = bin(
        BinOp::Sub,
        Expr::Cast {
            target: DataType::I32,
            value: Box::new(var("lin")),
        },
        Expr::i32(100),
    );
    let guarded = |threshold: u32| {
        vec![Node::if_then(
            bin(BinOp::Gt, var("v"), u(threshold)),
            vec![Node::store(
                "out",
                gid(),
                shuffle(var("v"), negative_lane.clone()),
            )],
        )]
    };
    vec![
        Case::new(
            "subgroup operand fault in a branch no lane takes",
            lanes(DataType::U32, n, n, workgroup, guarded(5000)),
            vec![values(n)],
        ),
        Case::new(
            "subgroup operand fault in a branch some lanes take",
            lanes(DataType::U32, n, n, workgroup, guarded(900)),
            vec![values(n)],
        )
        .failing(),
    ]
}

/// Returned lanes meet later barriers with the others; the operand reads workgroup memory
/// the running lanes wrote (zero where a returned lane would have).
fn barrier_after_return() -> Vec<Case> {
    let (workgroup, n) = (48, 96);
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::output("out", 1, DataType::U32).with_count(n),
            BufferDecl::workgroup("tile", workgroup, DataType::U32),
        ],
        [workgroup, 1, 1],
        vec![
            Node::let_bind("lin", Expr::LocalId { axis: 0 }),
            Node::let_bind("v", Expr::load("a", gid())),
            returns_if(modulo_is(var("v"), 3, 0)),
            Node::store("tile", var("lin"), var("v")),
            Node::barrier_with_ordering(MemoryOrdering::SeqCst),
            Node::store(
                "out",
                gid(),
                reduce(
                    SubgroupReduceOp::Add,
                    Expr::load("tile", bin(BinOp::BitXor, var("lin"), u(1))),
                ),
            ),
        ],
    );
    vec![Case::new(
        "subgroup reduce over workgroup memory after Return and a barrier",
        program,
        vec![values(n)],
    )]
}

fn f64_bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// f64 lanes: values f32 cannot hold, subnormal and out of f32 range once rounded.
fn f64_values(n: u32) -> Vec<u8> {
    let special = [1.0e-40, -3.0e-39, 1.0e39, f64::MIN_POSITIVE, 1.0 + 1.0e-12];
    let values = (0..n).map(|i| match special.get(i as usize % 9) {
        Some(value) => *value,
        None => f64::from(i) * 0.1 - 2.5,
    });
    f64_bytes(&values.collect::<Vec<_>>())
}

/// Lane types the reference treats apart: f64 lanes are combined as floats (a shuffle
/// hands the f64 over whole, a reduction folds `lane as f32`); i32, u64 and bool lanes fail
/// the dispatch where the operation runs, and only there.
fn lane_kinds() -> Vec<Case> {
    let (workgroup, n) = (64, 128);
    let f64_case = |name: &str, value: Expr| {
        let body = vec![Node::store("out", gid(), value)];
        Case::new(
            name,
            lanes(DataType::F64, n, n, workgroup, body),
            vec![f64_values(n)],
        )
    };
    let reversed = bin(BinOp::Sub, u(31), bin(BinOp::Mod, var("lin"), u(32)));
    let mut cases = vec![f64_case(
        "subgroup shuffle of f64 lanes",
        shuffle(var("v"), reversed),
    )];
    for op in [
        SubgroupReduceOp::Add,
        SubgroupReduceOp::Min,
        SubgroupReduceOp::Max,
    ] {
        cases.push(f64_case(
            &format!("subgroup reduce {op:?} of f64 lanes"),
            reduce(op, var("v")),
        ));
    }
    let as_i32 = |value: Expr| Expr::cast(DataType::I32, value);
    let as_u64 = |value: Expr| Expr::cast(DataType::U64, value);
    let uncombined = [
        (
            "i32 reduce",
            reduce(SubgroupReduceOp::Add, as_i32(var("v"))),
        ),
        ("i32 shuffle", shuffle(as_i32(var("v")), u(0))),
        ("u64 shuffle", shuffle(as_u64(var("v")), u(1))),
        (
            "bool reduce",
            reduce(SubgroupReduceOp::Max, bin(BinOp::Gt, var("v"), u(3))),
        ),
    ];
    for (what, value) in uncombined {
        let stored = |value: Expr| Node::store("out", gid(), Expr::cast(DataType::U32, value));
        let reached = vec![stored(value.clone())];
        // Uniform (a[0] is 12), so the subgroup stays converged.
        let guarded = vec![Node::if_then(
            bin(BinOp::Eq, Expr::load("a", u(0)), u(0)),
            vec![stored(value)],
        )];
        cases.push(
            Case::new(
                format!("subgroup {what} reached"),
                lanes(DataType::U32, n, n, workgroup, reached),
                vec![values(n)],
            )
            .failing(),
        );
        cases.push(Case::new(
            format!("subgroup {what} in a branch no lane takes"),
            lanes(DataType::U32, n, n, workgroup, guarded),
            vec![values(n)],
        ));
    }
    cases
}

/// Subgroup operations of constant operands after a `Return` inside a data-dependent
/// branch, their results used only in further data-dependent branches, in one short
/// warp: the shape of fuzz seed 0xfe07102fb36b3fcd, whose kernel ptxas made hang by
/// recomputing a `vote.sync` inside such a branch (its shrunk program, which still does
/// that with emitter v13, is `tests/fuzz_regressions/gpu-hang-fe07102fb36b3fcd.case`).
pub fn constant_operand_cases() -> Vec<Case> {
    let (workgroup, n) = (15, 30);
    let store_if = |cond: Expr, at: Expr, value: Expr| {
        Node::if_then(cond, vec![Node::store("out", at, value)])
    };
    let body = vec![
        Node::if_then(
            bin(BinOp::Ne, bin(BinOp::Add, var("lin"), u(1)), u(0)),
            vec![
                returns_if(modulo_is(var("v"), 3, 0)),
                Node::let_bind("g1", ballot(bin(BinOp::Ge, var("lin"), u(50)))),
                Node::let_bind("g2", ballot(Expr::bool(true))),
                Node::let_bind("g3", reduce(SubgroupReduceOp::Add, u(1))),
                Node::let_bind("g4", shuffle(u(7), u(3))),
                store_if(modulo_is(var("v"), 2, 0), gid(), var("g1")),
                store_if(
                    modulo_is(var("v"), 2, 1),
                    gid(),
                    bin(BinOp::Add, var("g2"), bin(BinOp::Add, var("g3"), var("g4"))),
                ),
            ],
        ),
        Node::let_bind("g5", reduce(SubgroupReduceOp::Max, u(9))),
        store_if(
            modulo_is(var("lin"), 4, 1),
            bin(BinOp::Add, gid(), u(n)),
            var("g5"),
        ),
    ];
    vec![Case::new(
        "subgroup ops of constant operands after a Return, used in branches",
        lanes(DataType::U32, n, 2 * n, workgroup, body),
        vec![values(n)],
    )]
}
