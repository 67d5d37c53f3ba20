//! Buffers of vectors of lanes without a fixed storage width (`Vec<f32; 4>`, `Vec<u32; 2>`,
//! `Vec<f32; 3>`, `Vec<u64; 2>`): vyre-reference loads such an element as all of its bytes,
//! but out of bounds as the *empty* bytes, which are falsy where any in-bounds value wider
//! than four bytes (even all zeros) is truthy, and which store as zeros. Each case has
//! loads on both sides of a buffer's end, and reads the loads' truthiness (a `Select`
//! condition, a ballot) beside their bytes: directly, through variables, a workgroup
//! buffer, a step machine, returned lanes and a loop whose loads a test before it proves.
//! The same for elements wider than 16 bytes (up to 255), whose values span more than two
//! registers: `Vec<f32; 8>`, `Vec<u32; 5>` (empty out of bounds), `Vec<u8; 32>` (a digest),
//! `Vec<u16; 9>`, `Vec<u8; 255>` (fixed-width lanes: zeros out of bounds, truthy), and
//! 20-byte arrays (a zero stride: every load a 20-byte zero value, every store nothing).
//! Appended after every other semantic case.

#![allow(dead_code)]

use super::programs::Case;
use super::subgroup_programs::{ballot, bin, gid, u, var};
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program};

const N: u32 = 64;

fn add(l: Expr, r: Expr) -> Expr {
    bin(BinOp::Add, l, r)
}

fn vec_of(element: DataType, count: u8) -> DataType {
    DataType::Vec {
        element: Box::new(element),
        count,
    }
}

/// The element types, with their width in bytes.
fn elements() -> [(DataType, u32); 11] {
    [
        (vec_of(DataType::F32, 4), 16),
        (vec_of(DataType::U64, 2), 16),
        (vec_of(DataType::U32, 2), 8),
        (vec_of(DataType::F32, 3), 12),
        (vec_of(DataType::I32, 1), 4),
        (vec_of(DataType::F32, 8), 32),
        (vec_of(DataType::U32, 5), 20),
        (vec_of(DataType::U8, 32), 32),
        (vec_of(DataType::U16, 9), 18),
        (vec_of(DataType::U8, 255), 255),
        (DataType::Array { element_size: 20 }, 20),
    ]
}

/// `count` elements of `width` bytes; every fourth element all zero bytes (truthy all the
/// same in bounds, when wider than four bytes).
fn input(count: u32, width: u32) -> Vec<u8> {
    input_bytes(count * width, width)
}

/// `len` bytes of elements `width` bytes wide, every fourth element zero.
fn input_bytes(len: u32, width: u32) -> Vec<u8> {
    (0..len)
        .map(|i| match (i / width) % 4 {
            2 => 0,
            _ => (i as u8).wrapping_mul(53).wrapping_add(7),
        })
        .collect()
}

/// `1 + gid` where `value` is truthy, else 2 (as a `Select` condition).
fn truth(value: Expr) -> Expr {
    Expr::select(value, add(gid(), u(1)), u(2))
}

/// `a` of `ty` holding `N / 2` elements; `vals` (of `ty`, read-write: one output per
/// program) and `flags` (u32) `N` each.
fn buffers(ty: &DataType) -> Vec<BufferDecl> {
    vec![
        BufferDecl::read("a", 0, ty.clone()).with_count(N / 2),
        BufferDecl::read_write("vals", 1, ty.clone()).with_count(N),
        BufferDecl::output("flags", 2, DataType::U32).with_count(N),
    ]
}

/// A program over `a` and `flags` (no `vals`) of `N` invocations running `body`.
fn flags_only(ty: &DataType, body: Vec<Node>) -> Program {
    let mut decls = buffers(ty);
    decls.remove(1);
    Program::wrapped(decls, [N, 1, 1], body)
}

/// `vals[gid] = v` and `flags[gid] = truth(v)` for a `v` of `ty` computed by `body`.
fn both(ty: &DataType, workgroup: u32, mut body: Vec<Node>) -> Program {
    body.push(Node::store("vals", gid(), var("v")));
    body.push(Node::store("flags", gid(), truth(var("v"))));
    Program::wrapped(buffers(ty), [workgroup, 1, 1], body)
}

fn odd() -> Expr {
    bin(BinOp::Eq, bin(BinOp::BitAnd, gid(), u(1)), u(1))
}

/// `v = a[gid + 3]` (past the end from gid 29).
fn direct(ty: &DataType) -> Program {
    both(
        ty,
        N,
        vec![Node::let_bind("v", Expr::load("a", add(gid(), u(3))))],
    )
}

/// `v` bound in bounds, assigned past the end in odd invocations, then a `Select` of it and
/// another load (in bounds or not) in every third.
fn through_variables(ty: &DataType) -> Program {
    let third = bin(BinOp::Eq, bin(BinOp::Mod, gid(), u(3)), u(0));
    both(
        ty,
        N,
        vec![
            Node::let_bind("v", Expr::load("a", bin(BinOp::Mod, gid(), u(N / 2)))),
            Node::if_then(
                odd(),
                vec![Node::assign("v", Expr::load("a", add(gid(), u(N / 4))))],
            ),
            Node::if_then(
                third,
                vec![Node::assign(
                    "v",
                    Expr::select(
                        bin(BinOp::Lt, gid(), u(40)),
                        Expr::load("a", add(gid(), u(9))),
                        var("v"),
                    ),
                )],
            ),
        ],
    )
}

/// `tile[lid] = a[gid]`, a barrier, `v = tile[lid ^ 3]`: the tile holds 62 elements, so
/// lanes 60 and 61 read past its end (and `a` ends at 32).
fn through_workgroup(ty: &DataType) -> Program {
    let lid = Expr::LocalId { axis: 0 };
    let mut decls = buffers(ty);
    decls.push(BufferDecl::workgroup("tile", 62, ty.clone()));
    let mut body = vec![
        Node::store("tile", lid.clone(), Expr::load("a", gid())),
        Node::barrier_with_ordering(MemoryOrdering::SeqCst),
        Node::let_bind("v", Expr::load("tile", bin(BinOp::BitXor, lid, u(3)))),
    ];
    body.push(Node::store("vals", gid(), var("v")));
    body.push(Node::store("flags", gid(), truth(var("v"))));
    Program::wrapped(decls, [N, 1, 1], body)
}

/// `flags[gid] = ballot(a[gid + 13])`: the second subgroup's lanes past 18 read past the end.
fn ballot_of_loads(ty: &DataType) -> Program {
    let mut decls = buffers(ty);
    decls.truncate(1);
    decls.push(BufferDecl::output("flags", 1, DataType::U32).with_count(N));
    Program::wrapped(
        decls,
        [N, 1, 1],
        vec![Node::store(
            "flags",
            gid(),
            ballot(Expr::load("a", add(gid(), u(13)))),
        )],
    )
}

/// Lanes with `gid % 4 == 1` return holding `v` (past the end for some); the others'
/// ballot reads every lane's `v`, the returned lanes' frozen ones included. A barrier at
/// the end keeps the lanes that run on with their variables bound.
fn returned_lanes(ty: &DataType) -> Program {
    flags_only(
        ty,
        vec![
            Node::let_bind("v", Expr::load("a", add(gid(), u(5)))),
            Node::if_then(
                bin(BinOp::Eq, bin(BinOp::Mod, gid(), u(4)), u(1)),
                vec![Node::Return],
            ),
            Node::if_then(
                odd(),
                vec![Node::assign("v", Expr::load("a", add(gid(), u(20))))],
            ),
            Node::store("flags", gid(), ballot(var("v"))),
            Node::barrier_with_ordering(MemoryOrdering::SeqCst),
        ],
    )
}

/// A loop of `gid % 3` iterations (a step machine) assigning `v` a load each and taking
/// a ballot of it; then a ballot after the loop.
fn step_machine(ty: &DataType) -> Program {
    flags_only(
        ty,
        vec![
            Node::let_bind("v", Expr::load("a", gid())),
            Node::let_bind("acc", u(0)),
            Node::loop_for(
                "i",
                u(0),
                bin(BinOp::Mod, gid(), u(3)),
                vec![
                    Node::assign(
                        "v",
                        Expr::load("a", add(gid(), bin(BinOp::Mul, var("i"), u(11)))),
                    ),
                    Node::assign("acc", bin(BinOp::BitXor, var("acc"), ballot(var("v")))),
                ],
            ),
            Node::store("flags", gid(), add(var("acc"), ballot(var("v")))),
            Node::barrier_with_ordering(MemoryOrdering::SeqCst),
        ],
    )
}

/// `flags[gid]` counts the truthy loads of `a[gid / 2 + k]`, `k < 4`: the loop's loads are
/// proven in bounds by one test before it for the first invocations (filled without a
/// check), checked one by one for the others.
fn hoisted_loop(ty: &DataType) -> Program {
    flags_only(
        ty,
        vec![
            Node::let_bind("count", u(0)),
            Node::loop_for(
                "k",
                u(0),
                u(4),
                vec![Node::assign(
                    "count",
                    add(
                        var("count"),
                        Expr::select(
                            Expr::load("a", add(bin(BinOp::Div, gid(), u(2)), var("k"))),
                            u(1),
                            u(0),
                        ),
                    ),
                )],
            ),
            Node::store("flags", gid(), var("count")),
        ],
    )
}

/// A program over a buffer of the given element type.
type Shape = fn(&DataType) -> Program;

/// Every case of this file.
pub fn maybe_empty_vector_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (ty, width) in elements() {
        let shapes: [(&str, Shape); 7] = [
            (
                "loads past the end are empty: zero bytes stored, falsy",
                direct,
            ),
            (
                "empty loads through Let, Assign and Select",
                through_variables,
            ),
            ("a workgroup buffer read past its end", through_workgroup),
            ("a ballot of loads past the end", ballot_of_loads),
            ("returned lanes keep their empty values", returned_lanes),
            ("empty values in a step machine", step_machine),
            ("proven and checked loads of a loop", hoisted_loop),
        ];
        for (name, shape) in shapes {
            let program = shape(&ty);
            // `a`, and `vals` where the program has it (its elements not stored stay).
            let inputs = (program.buffers().iter())
                .filter_map(|decl| match decl.name() {
                    "a" => Some(input(N / 2, width)),
                    "vals" => Some(vec![0xa5; (N * width) as usize]),
                    _ => None,
                })
                .collect();
            cases.push(Case::new(
                format!("{ty} ({width} bytes): {name}"),
                program,
                inputs,
            ));
        }
    }
    cases
}

/// Buffers of vectors of several 4-bit lanes (`Vec<i4; 2>`): a byte a lane, so each
/// element is `lanes` bytes apart, but the reference counts them by their bits, two for
/// every addressed element, and a trailing partial element of half the stride or more
/// counts one more. `vals[gid] = a[gid + 1]`, and `flags` takes both buffers' and a
/// workgroup buffer's `BufLen` and the truthiness of a load, over inputs with such tails.
pub fn nibble_vector_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (lanes, tail) in [(2u32, 1u32), (3, 2), (3, 1), (8, 5), (5, 0)] {
        for lane in [DataType::I4, DataType::NF4, DataType::FP4] {
            let ty = vec_of(lane, lanes as u8);
            let flags = add(
                add(
                    bin(BinOp::Mul, Expr::buf_len("a"), u(1_000_000)),
                    bin(BinOp::Mul, Expr::buf_len("vals"), u(1000)),
                ),
                add(
                    bin(BinOp::Mul, Expr::buf_len("tile"), u(10)),
                    Expr::select(Expr::load("a", gid()), u(1), u(2)),
                ),
            );
            let program = Program::wrapped(
                vec![
                    BufferDecl::read("a", 0, ty.clone()).with_count(N / 2),
                    BufferDecl::read_write("vals", 1, ty.clone()).with_count(N),
                    BufferDecl::output("flags", 2, DataType::U32).with_count(N),
                    BufferDecl::workgroup("tile", 61, ty.clone()),
                ],
                [N, 1, 1],
                vec![
                    Node::store("tile", Expr::LocalId { axis: 0 }, Expr::load("a", gid())),
                    Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                    Node::store("vals", gid(), Expr::load("a", add(gid(), u(1)))),
                    Node::store("flags", gid(), flags),
                    Node::store(
                        "vals",
                        add(gid(), u(N / 2)),
                        Expr::load("tile", bin(BinOp::BitXor, Expr::LocalId { axis: 0 }, u(5))),
                    ),
                ],
            );
            // At least the declared (packed) size, plus whole elements and a tail.
            let declared = |count: u32| (count * lanes).div_ceil(2);
            let a = input_bytes(declared(N / 2) + lanes * 3 + tail, lanes);
            let vals = vec![0x5a; (declared(N) + tail) as usize];
            cases.push(Case::new(
                format!("{ty}: a byte a lane, counted by bits, a {tail}-byte tail"),
                program,
                vec![a, vals],
            ));
        }
    }
    cases
}
