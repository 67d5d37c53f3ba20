//! Subgroup operands over a variable that lanes of one subgroup bound with different types
//! (`lower::typed_lanes`): a u32 in one branch and an f32 in the other of a step machine's
//! data-dependent branch, a returned lane's u32 against the running lanes' f32, a bytes
//! view against a u32. The reference evaluates each lane's operand on that lane's own
//! bindings: a ballot tests each lane's value as its own type; a shuffle or reduction of
//! a u32 and a float fails the dispatch ("mixed value types"), as does an operator the
//! other type does not take; floats of two widths combine. Appended to the semantic cases.

#![allow(dead_code)]

use super::gpu::u32_bytes;
use super::programs::{bytes_in, bytes_tail_source, Case};
use super::subgroup_programs::{
    ballot, bin, gid, lanes, modulo_is, reduce, shuffle, u, values, var, with_lane_ids,
};
use vyre_foundation::ir::{
    BinOp, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program, SubgroupReduceOp,
};

const WORKGROUPS: [u32; 2] = [64, 40];

fn cast(target: DataType, value: Expr) -> Expr {
    Expr::cast(target, value)
}

fn rem(l: Expr, m: u32) -> Expr {
    bin(BinOp::Mod, l, u(m))
}

/// `f32(v % 4) - 1.0`: -1, 0, 1 or 2, falsy where `v % 4 == 1`.
fn small_f32() -> Expr {
    bin(
        BinOp::Sub,
        cast(DataType::F32, rem(var("v"), 4)),
        Expr::f32(1.0),
    )
}

/// `body` then a barrier: lanes finishing early keep their variables bound for the
/// others' operands.
fn settled(mut body: Vec<Node>) -> Vec<Node> {
    body.push(Node::barrier_with_ordering(MemoryOrdering::SeqCst));
    body
}

/// [`settled`] `body` over `a` and a u32 `out`.
fn case(name: &str, workgroup: u32, body: Vec<Node>) -> Case {
    let n = workgroup * 2;
    Case::new(
        format!("lanes of two types: {name}, workgroup {workgroup}"),
        lanes(DataType::U32, n, n, workgroup, settled(body)),
        vec![values(n)],
    )
}

/// `x` a u32 where `v % 3 == 0`, an f32 elsewhere, each branch storing `result(x)`.
fn branches(as_u32: Expr, as_f32: Expr, result: impl Fn() -> Expr) -> Vec<Node> {
    vec![Node::if_then_else(
        modulo_is(var("v"), 3, 0),
        vec![
            Node::let_bind("x", as_u32),
            Node::store("out", gid(), result()),
        ],
        vec![
            Node::let_bind("x", as_f32),
            Node::store("out", gid(), result()),
        ],
    )]
}

/// Lanes with `lin % 5 == 0` bind `x` to `as_u32` and return; the others bind it to
/// `as_f32` and store `result(x)`.
fn returned(as_u32: Expr, as_f32: Expr, result: Expr) -> Vec<Node> {
    vec![
        Node::if_then(
            modulo_is(var("lin"), 5, 0),
            vec![Node::let_bind("x", as_u32), Node::Return],
        ),
        Node::let_bind("x", as_f32),
        Node::store("out", gid(), result),
    ]
}

pub fn typed_lane_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for workgroup in WORKGROUPS {
        let ballot_x = || ballot(var("x"));
        cases.push(case(
            "ballot in both branches",
            workgroup,
            branches(rem(var("v"), 2), small_f32(), ballot_x),
        ));
        // The cast truncates the f32 lanes' quarters, passes the u32 lanes' values.
        let odd = || ballot(modulo_is(cast(DataType::U32, var("x")), 2, 1));
        let quarter = bin(BinOp::Mul, cast(DataType::F32, var("v")), Expr::f32(0.25));
        cases.push(case(
            "ballot of a cast in both branches",
            workgroup,
            branches(var("v"), quarter, odd),
        ));
        cases.push(case(
            "ballot after a return",
            workgroup,
            returned(rem(var("v"), 2), small_f32(), ballot(var("x"))),
        ));
        // Every value is at least 1: every lane binds the u32, nothing mixes.
        let shuffled = || shuffle(var("x"), rem(bin(BinOp::Add, var("lin"), u(3)), 32));
        cases.push(case(
            "shuffle where every lane took the u32 branch",
            workgroup,
            vec![Node::if_then_else(
                bin(BinOp::Ge, var("v"), u(1)),
                vec![
                    Node::let_bind("x", var("v")),
                    Node::store("out", gid(), shuffled()),
                ],
                vec![
                    Node::let_bind("x", small_f32()),
                    Node::store("out", gid(), cast(DataType::U32, shuffled())),
                ],
            )],
        ));
        cases.push(
            case(
                "shuffle of a u32 and an f32",
                workgroup,
                branches(var("v"), small_f32(), || cast(DataType::U32, shuffled())),
            )
            .failing(),
        );
        cases.push(
            case(
                "reduction of a u32 and an f32 after a return",
                workgroup,
                returned(
                    var("v"),
                    small_f32(),
                    cast(DataType::U32, reduce(SubgroupReduceOp::Max, var("x"))),
                ),
            )
            .failing(),
        );
        // `x & 1` of the f32 lanes: an operator floats do not take.
        let low_bit = || ballot(bin(BinOp::BitAnd, var("x"), u(1)));
        cases.push(
            case(
                "operator the other type does not take",
                workgroup,
                vec![Node::if_then_else(
                    modulo_is(var("v"), 3, 0),
                    vec![
                        Node::let_bind("x", var("v")),
                        Node::store("out", gid(), low_bit()),
                    ],
                    vec![
                        Node::let_bind("x", small_f32()),
                        Node::store("out", gid(), ballot(var("x"))),
                    ],
                )],
            )
            .failing(),
        );
        cases.push(view_and_u32(workgroup, false));
        cases.push(view_and_u32(workgroup, true));
        cases.push(serial_round(workgroup));
    }
    cases.push(f32_and_f64(SubgroupReduceOp::Add));
    cases.push(f32_and_f64(SubgroupReduceOp::Max));
    for (workgroup, after_return, half) in
        [(64, false, false), (40, true, false), (64, false, true)]
    {
        cases.push(f64_shuffled_at_f32(workgroup, after_return, half));
    }
    cases.push(widened_chain());
    cases.push(f64_shuffled_into_half(false));
    cases.push(f64_shuffled_into_half(true).failing());
    cases
}

/// `x` a bytes view of `b` (7 to 1 bytes, some all zero) where `v % 3 == 0`, a u32
/// elsewhere (after a return: in the returning lanes); every lane's ballot tests its own.
fn view_and_u32(workgroup: u32, after_return: bool) -> Case {
    let view = Expr::load("b", bin(BinOp::Add, u(30), rem(var("v"), 7)));
    let body = match after_return {
        false => branches(view, rem(var("v"), 2), || ballot(var("x"))),
        true => returned(view, rem(var("v"), 2), ballot(var("x"))),
    };
    let n = workgroup * 2;
    let entry = with_lane_ids(settled(body));
    let source = bytes_tail_source();
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            bytes_in("b", 1, source.len() as u32),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [workgroup, 1, 1],
        entry,
    );
    let place = match after_return {
        false => "in branches",
        true => "after a return",
    };
    Case::new(
        format!("lanes of two types: a bytes view and a u32 {place}, workgroup {workgroup}"),
        program,
        vec![values(n), source],
    )
}

/// The operand reads `out`, which the segment writes (each lane's own slot, so no other
/// workgroup writes what it reads): lanes take turns, each reading the others' bindings
/// as they were at the round's start.
fn serial_round(workgroup: u32) -> Case {
    let seen = || {
        ballot(bin(
            BinOp::Or,
            bin(BinOp::Ne, cast(DataType::U32, var("x")), u(0)),
            bin(BinOp::Eq, Expr::load("out", gid()), u(7)),
        ))
    };
    let body = branches(rem(var("v"), 3), small_f32(), seen);
    let n = workgroup * 2;
    let entry = with_lane_ids(settled(body));
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read_write("out", 1, DataType::U32).with_count(n),
        ],
        [workgroup, 1, 1],
        entry,
    );
    let seven: Vec<u32> = (0..n).map(|i| if i % 5 == 0 { 7 } else { 0 }).collect();
    Case::new(
        format!("lanes of two types: a serial round, workgroup {workgroup}"),
        program,
        vec![values(n), u32_bytes(&seven)],
    )
}

/// The lane after this one in its subgroup (wrapping).
fn next_lane() -> Expr {
    rem(bin(BinOp::Add, var("lin"), u(1)), 32)
}

/// `x` an f64 load where `v % 3 == 0`, an f32 elsewhere: both are the reference's one
/// float, which reductions fold as f32s and a shuffle at the f64 lanes hands over whole.
fn f32_and_f64(op: SubgroupReduceOp) -> Case {
    let (workgroup, n) = (64, 128);
    let x_f32 = bin(BinOp::Mul, cast(DataType::F32, var("v")), Expr::f32(0.3));
    let reduced = || reduce(op, var("x"));
    let body = vec![Node::if_then_else(
        modulo_is(var("v"), 3, 0),
        vec![
            Node::let_bind("x", Expr::load("d", gid())),
            Node::store("wide", gid(), reduced()),
            Node::store("shuffled", gid(), shuffle(var("x"), next_lane())),
        ],
        vec![
            Node::let_bind("x", x_f32),
            Node::store("out", gid(), reduced()),
        ],
    )];
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read("d", 1, DataType::F64).with_count(n),
            BufferDecl::output("out", 2, DataType::F32).with_count(n),
            BufferDecl::read_write("wide", 3, DataType::F64).with_count(n),
            BufferDecl::read_write("shuffled", 4, DataType::F64).with_count(n),
        ],
        [workgroup, 1, 1],
        with_lane_ids(settled(body)),
    );
    let doubles: Vec<u8> = (0..n)
        .flat_map(|i| (f64::from(i) * 1.000_000_1 + 1e-9).to_le_bytes())
        .collect();
    Case::new(
        format!("lanes of two types: {op:?} of f32 and f64 lanes, workgroup {workgroup}"),
        program,
        vec![
            values(n),
            doubles,
            vec![0; n as usize * 8],
            vec![0; n as usize * 8],
        ],
    )
}

/// f64 values where rounding to f32 changes what f32 code sees: integers nudged below an
/// f32 ulp (a cast truncates the f64), magnitudes under the smallest f32 (truthy, yet
/// ±0 as an f32) and over the largest (±inf), a NaN with a payload, -0 and an f32 value.
fn f64_edges(n: u32) -> Vec<u8> {
    let edges = [
        |i: f64| i + 0.999_999_999_9,
        |_| 1e-50,
        |_| -3e-300,
        |i: f64| 1e300 * (i - 500.0),
        |_| f64::from_bits(0x7FF8_0000_0000_0001),
        |_| -0.0,
        |i: f64| f64::from(i as f32 * 0.25),
    ];
    (0..n)
        .flat_map(|i| edges[i as usize % edges.len()](f64::from(i)).to_le_bytes())
        .collect()
}

/// `x` an f64 load where `v % 3 == 0` ([`f64_edges`]), an f32 elsewhere (`after_return`:
/// the f64 lanes bind it and return). The f32 lanes shuffle it from the next lane,
/// receiving the f64 lanes' values whole, and use them as f32 code does: stored into an
/// f32 buffer (rounded there), cast to u32 (truncating the f64) and to bool, picked by a
/// select into an f32 variable (which then holds f64 values: cast to i32, truncated) and
/// computed with. The f64 lanes shuffle it too (the f32 lanes' values, as f64 bits). With
/// `half` the program also has an f16 buffer (whose programs hold assigned f32 variables
/// as halves).
fn f64_shuffled_at_f32(workgroup: u32, after_return: bool, half: bool) -> Case {
    let n = workgroup * 2;
    let f64_lanes = vec![
        Node::let_bind("x", Expr::load("d", gid())),
        Node::store("bits", gid(), shuffle(var("x"), next_lane())),
    ];
    let truth = Expr::select(cast(DataType::Bool, var("g")), u(1000), u(2000));
    let f32_lanes = vec![
        Node::let_bind(
            "x",
            bin(BinOp::Mul, cast(DataType::F32, var("v")), Expr::f32(0.3)),
        ),
        Node::let_bind("g", shuffle(var("x"), next_lane())),
        Node::store("out", gid(), var("g")),
        Node::store(
            "ints",
            gid(),
            bin(BinOp::Add, cast(DataType::U32, var("g")), truth),
        ),
        Node::let_bind("y", Expr::f32(0.5)),
        Node::assign(
            "y",
            Expr::select(modulo_is(var("lin"), 2, 1), var("g"), var("y")),
        ),
        Node::store("signed", gid(), cast(DataType::I32, var("y"))),
        Node::assign("y", bin(BinOp::Mul, var("y"), Expr::f32(2.0))),
        Node::store("twice", gid(), var("y")),
    ];
    let body = match after_return {
        false => vec![Node::if_then_else(
            modulo_is(var("v"), 3, 0),
            f64_lanes,
            f32_lanes,
        )],
        true => {
            let mut body = vec![Node::if_then(
                modulo_is(var("v"), 3, 0),
                vec![Node::let_bind("x", Expr::load("d", gid())), Node::Return],
            )];
            body.extend(f32_lanes);
            body
        }
    };
    let mut buffers = vec![
        BufferDecl::read("a", 0, DataType::U32).with_count(n),
        BufferDecl::read("d", 1, DataType::F64).with_count(n),
        BufferDecl::output("out", 2, DataType::F32).with_count(n),
        BufferDecl::read_write("ints", 3, DataType::U32).with_count(n),
        BufferDecl::read_write("bits", 4, DataType::F64).with_count(n),
        BufferDecl::read_write("twice", 5, DataType::F32).with_count(n),
        BufferDecl::read_write("signed", 6, DataType::I32).with_count(n),
    ];
    let mut inputs = vec![
        values(n),
        f64_edges(n),
        vec![0; n as usize * 4],
        vec![0; n as usize * 8],
        vec![0; n as usize * 4],
        vec![0; n as usize * 4],
    ];
    if half {
        buffers.push(BufferDecl::read("h", 7, DataType::F16).with_count(4));
        inputs.push(vec![0; 8]);
    }
    let place = match (after_return, half) {
        (false, false) => "in branches",
        (true, _) => "after a return",
        (false, true) => "in branches, with an f16 buffer",
    };
    Case::new(
        format!(
            "lanes of two types: f64 lanes shuffled at f32 lanes {place}, workgroup {workgroup}"
        ),
        Program::wrapped(buffers, [workgroup, 1, 1], with_lane_ids(settled(body))),
        inputs,
    )
}

/// `x` an f64 load where `v % 3 == 0` (whose lanes shuffle it too), an f16 load elsewhere;
/// at the f16 lanes `y`, bound
/// to an out-of-bounds f16 load (the reference's two zero bytes), is assigned in even
/// lanes a shuffle of `x` from the next lane (an f64 lane's value whole), and `z` selects
/// between such a shuffle and the out-of-bounds load: both hold either. Stored into f16
/// buffers (rounded, or 0), tested for truth and cast to u32 they read as +0.0 where they
/// are the bytes; with `multiplied`, `y * 1.0` fails there, as the reference's operator
/// does on bytes.
fn f64_shuffled_into_half(multiplied: bool) -> Case {
    let (workgroup, n) = (64, 128);
    let past_end = || Expr::load("h", bin(BinOp::Add, gid(), u(n)));
    let shuffled = || shuffle(var("x"), next_lane());
    // The shuffles of both sides are their second statements: the reference evaluates
    // a lane's operand at its own step, and the f64 lanes' `x` ends with their branch.
    let mut half_lanes = vec![
        Node::let_bind("x", Expr::load("h", gid())),
        Node::let_bind("s", shuffled()),
        Node::let_bind("y", past_end()),
        Node::if_then(
            modulo_is(var("lin"), 2, 0),
            vec![Node::assign("y", var("s"))],
        ),
        Node::let_bind(
            "z",
            Expr::select(modulo_is(var("lin"), 3, 1), var("s"), past_end()),
        ),
        Node::store("out", gid(), var("y")),
        Node::store("zs", gid(), var("z")),
        Node::store(
            "ints",
            gid(),
            bin(
                BinOp::Add,
                cast(DataType::U32, cast(DataType::F32, var("z"))),
                Expr::select(
                    cast(DataType::Bool, cast(DataType::F32, var("y"))),
                    u(1000),
                    u(2000),
                ),
            ),
        ),
    ];
    if multiplied {
        let product = bin(BinOp::Mul, var("y"), Expr::load("h", gid()));
        half_lanes.push(Node::store("zs", gid(), product));
    }
    let body = vec![Node::if_then_else(
        modulo_is(var("v"), 3, 0),
        vec![
            Node::let_bind("x", Expr::load("d", gid())),
            Node::store("bits", gid(), shuffled()),
        ],
        half_lanes,
    )];
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read("d", 1, DataType::F64).with_count(n),
            BufferDecl::read("h", 2, DataType::F16).with_count(n),
            BufferDecl::output("out", 3, DataType::F16).with_count(n),
            BufferDecl::read_write("zs", 4, DataType::F16).with_count(n),
            BufferDecl::read_write("ints", 5, DataType::U32).with_count(n),
            BufferDecl::read_write("bits", 6, DataType::F64).with_count(n),
        ],
        [workgroup, 1, 1],
        with_lane_ids(settled(body)),
    );
    let halves: Vec<u8> = (0..n)
        .flat_map(|i| (0x3C00u16 + (i as u16 % 40) * 0x20).to_le_bytes())
        .collect();
    let tail = if multiplied { ", then multiplied" } else { "" };
    Case::new(
        format!("lanes of two types: f64 lanes shuffled into half variables{tail}, workgroup {workgroup}"),
        program,
        vec![
            values(n),
            f64_edges(n),
            halves,
            vec![0; n as usize * 2],
            vec![0; n as usize * 4],
            vec![0; n as usize * 8],
        ],
    )
}

/// A chain of widened variables: `y` (an f32) is assigned a shuffle of `x` that hands the
/// f64 lanes' values over whole, then `w` (an f32) is assigned `y`, which is f64-held only
/// once `y` is known to be: the entry is lowered three times. `w` cast to u32 truncates
/// the f64.
fn widened_chain() -> Case {
    let (workgroup, n) = (64, 128);
    let f64_lanes = vec![
        Node::let_bind("x", Expr::load("d", gid())),
        Node::store("bits", gid(), shuffle(var("x"), next_lane())),
    ];
    let f32_lanes = vec![
        Node::let_bind("x", cast(DataType::F32, var("v"))),
        Node::let_bind("y", Expr::f32(0.0)),
        Node::assign("y", shuffle(var("x"), next_lane())),
        Node::let_bind("w", Expr::f32(1.0)),
        Node::assign("w", var("y")),
        Node::store("out", gid(), cast(DataType::U32, var("w"))),
    ];
    let body = vec![Node::if_then_else(
        modulo_is(var("v"), 3, 0),
        f64_lanes,
        f32_lanes,
    )];
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read("d", 1, DataType::F64).with_count(n),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
            BufferDecl::read_write("bits", 3, DataType::F64).with_count(n),
        ],
        [workgroup, 1, 1],
        with_lane_ids(settled(body)),
    );
    Case::new(
        format!("lanes of two types: a chain of widened variables, workgroup {workgroup}"),
        program,
        vec![values(n), f64_edges(n), vec![0; n as usize * 8]],
    )
}
