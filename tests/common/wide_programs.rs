//! Elements wider than a value held in registers (over 255 bytes: `Vec<u32; 100>`,
//! `Vec<i64; 40>`, an `Array` of 300 bytes): their loads are bytes views. vyre's validator
//! lets such a value be stored into an element of its type, bound, selected, cast to its
//! own type, tested as a condition (truthy where not empty) and met by operators and
//! subgroup shuffles, which fail at run time.

#![allow(dead_code)]

use super::kernels::bin;
use super::programs::Case;
use super::subgroup_programs::{ballot, gid, shuffle};
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program};

/// Elements of each buffer; workgroups of 64 invocations.
const N: u32 = 24;

fn lid() -> Expr {
    Expr::LocalId { axis: 0 }
}

fn vec_of(element: DataType, count: u8) -> DataType {
    DataType::Vec {
        element: Box::new(element),
        count,
    }
}

/// `Vec<u32; 100>`: out of bounds the empty bytes (u32 lanes have no zero value).
fn u32_lanes() -> DataType {
    vec_of(DataType::U32, 100)
}

/// `Vec<i64; 40>`: out of bounds 320 zero bytes (i64 lanes have a storage width).
fn i64_lanes() -> DataType {
    vec_of(DataType::I64, 40)
}

fn stride(ty: &DataType) -> u32 {
    ty.min_bytes() as u32
}

/// `n` elements of `ty` of distinct bytes.
fn filled(ty: &DataType, n: u32, salt: u8) -> Vec<u8> {
    (0..n * stride(ty))
        .map(|i| (i as u8).wrapping_mul(131).wrapping_add(salt))
        .collect()
}

fn guarded(body: Vec<Node>) -> Vec<Node> {
    vec![Node::if_then(bin(BinOp::Lt, gid(), Expr::u32(N)), body)]
}

/// Read-only `a` and read-write `w` of `ty`, `N` each, and a u32 `out`; `body` runs in
/// invocations below `N`.
fn program(ty: &DataType, body: Vec<Node>) -> Program {
    unguarded(ty, guarded(body))
}

/// [`program`] with `body` run by every invocation (subgroup operands read every lane's
/// variables, which an invocation past the guard would not have bound).
fn unguarded(ty: &DataType, body: Vec<Node>) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, ty.clone()).with_count(N),
            BufferDecl::read_write("w", 1, ty.clone()).with_count(N),
            BufferDecl::output("out", 2, DataType::U32).with_count(N),
        ],
        [64, 1, 1],
        body,
    )
}

fn inputs(ty: &DataType) -> Vec<Vec<u8>> {
    vec![filled(ty, N, 7), filled(ty, N, 99)]
}

fn shifted(buffer: &str, by: u32) -> Expr {
    Expr::load(buffer, bin(BinOp::Add, gid(), Expr::u32(by)))
}

/// `a[gid + 1]` in even invocations, `a[gid + N - 4]` (out of bounds from gid 4 on) in odd.
fn near_or_far() -> Expr {
    let even = bin(
        BinOp::Eq,
        bin(BinOp::BitAnd, gid(), Expr::u32(1)),
        Expr::u32(0),
    );
    Expr::select(even, shifted("a", 1), shifted("a", N - 4))
}

fn count_into_out() -> Node {
    Node::store(
        "out",
        gid(),
        bin(
            BinOp::Add,
            bin(BinOp::Mul, Expr::buf_len("w"), Expr::u32(1000)),
            Expr::buf_len("a"),
        ),
    )
}

fn copies() -> Vec<Case> {
    let mut cases = Vec::new();
    // 510 bytes of 4-bit lanes, a byte each: counted by their bits, two elements per
    // addressed one (`kind::nibble_vector`).
    let nibbles = vec_of(vec_of(DataType::I4, 255), 2);
    for (name, ty) in [
        ("u32", u32_lanes()),
        ("i64", i64_lanes()),
        ("4-bit", nibbles),
    ] {
        cases.push(Case::new(
            format!("wide vec<{name}> elements are copied whole, out of bounds as their zero or empty bytes"),
            program(&ty, vec![Node::store("w", gid(), near_or_far()), count_into_out()]),
            inputs(&ty),
        ));
        cases.push(Case::new(
            format!("a wide vec<{name}> bound by let and cast to its type is the same bytes"),
            program(
                &ty,
                vec![
                    Node::let_bind("v", Expr::cast(ty.clone(), shifted("a", 3))),
                    Node::store("w", gid(), Expr::var("v")),
                ],
            ),
            inputs(&ty),
        ));
    }
    cases
}

/// The reference snapshots a load when it binds it: `v` keeps `w[gid]`'s bytes from before
/// the store over them, and a copy of the element onto itself changes nothing.
fn snapshots() -> Vec<Case> {
    let ty = u32_lanes();
    let body = vec![
        Node::let_bind("v", Expr::load("w", gid())),
        Node::store("w", gid(), Expr::load("a", gid())),
        Node::store("w", gid(), Expr::load("w", gid())),
        Node::if_then(
            bin(BinOp::Lt, gid(), Expr::u32(N / 2)),
            vec![Node::store("w", gid(), Expr::var("v"))],
        ),
    ];
    vec![Case::new(
        "a wide element bound before a store over it keeps its old bytes",
        program(&ty, body),
        inputs(&ty),
    )]
}

/// Conditions take a wide value's truthiness: more than four bytes are true, the empty
/// bytes of an out-of-bounds `Vec<u32; 100>` false; a zero-stride element's zero value
/// (300 bytes) true. A ballot takes the same truthiness in every lane.
fn conditions() -> Vec<Case> {
    let ty = u32_lanes();
    let far = Expr::load("a", bin(BinOp::Mul, gid(), Expr::u32(2)));
    let select = Expr::select(far.clone(), Expr::u32(1), Expr::u32(2));
    let far_ballot = ballot(far);
    let zeros = DataType::Array { element_size: 300 };
    let zero_ballot = Program::wrapped(
        vec![
            BufferDecl::read("z", 0, zeros.clone()).with_count(N),
            BufferDecl::read_write("w", 1, zeros.clone()).with_count(N),
            BufferDecl::output("out", 2, DataType::U32).with_count(N),
        ],
        [64, 1, 1],
        guarded(vec![
            Node::store("w", gid(), Expr::load("z", gid())),
            Node::store("out", gid(), ballot(Expr::load("z", gid()))),
        ]),
    );
    vec![
        Case::new(
            "a wide select condition is true when filled, false when empty",
            program(&ty, vec![Node::store("out", gid(), select)]),
            inputs(&ty),
        ),
        Case::new(
            "a ballot of wide values takes each lane's truthiness",
            program(&ty, vec![Node::store("out", gid(), far_ballot)]),
            inputs(&ty),
        ),
        Case::new(
            "zero-stride 300-byte elements load a true zero value and store nothing",
            zero_ballot,
            vec![
                vec![0x5a; (N * 300) as usize],
                vec![0xa5; (N * 300) as usize],
            ],
        ),
    ]
}

/// A wide variable as a subgroup operand where lanes returned (their value at the
/// `Return`) or took the other side of a branch.
fn subgroup_operands() -> Vec<Case> {
    let ty = u32_lanes();
    let lane_bit = |bit: u32| {
        bin(
            BinOp::Eq,
            bin(BinOp::BitAnd, gid(), Expr::u32(3)),
            Expr::u32(bit),
        )
    };
    let bind = Node::let_bind("v", Expr::load("a", bin(BinOp::Mul, gid(), Expr::u32(2))));
    let returned = vec![
        bind.clone(),
        Node::if_then(lane_bit(1), vec![Node::Return]),
        Node::store("out", gid(), ballot(Expr::var("v"))),
    ];
    let branches = vec![
        bind,
        Node::if_then_else(
            lane_bit(2),
            vec![Node::store("out", gid(), ballot(Expr::var("v")))],
            vec![Node::store("out", gid(), ballot(Expr::load("a", gid())))],
        ),
    ];
    vec![
        Case::new(
            "a ballot of a wide variable counts the returned lanes' values",
            unguarded(&ty, returned),
            inputs(&ty),
        ),
        Case::new(
            "ballots of wide values on both sides of a divergent branch",
            unguarded(&ty, branches),
            inputs(&ty),
        ),
    ]
}

/// A workgroup buffer of wide elements: each invocation writes its element, and after a
/// barrier reads its neighbour's.
fn workgroup() -> Vec<Case> {
    let ty = vec_of(DataType::U32, 70);
    let neighbour = bin(
        BinOp::Mod,
        bin(BinOp::Add, lid(), Expr::u32(1)),
        Expr::u32(N),
    );
    let program = Program::wrapped(
        vec![
            BufferDecl::read("a", 0, ty.clone()).with_count(N),
            BufferDecl::read_write("w", 1, ty.clone()).with_count(N),
            BufferDecl::workgroup("s", N, ty.clone()),
        ],
        [N, 1, 1],
        vec![
            Node::store("s", lid(), Expr::load("a", gid())),
            Node::barrier_with_ordering(MemoryOrdering::SeqCst),
            Node::store("w", gid(), Expr::load("s", neighbour)),
        ],
    );
    vec![Case::new(
        "a workgroup buffer of wide elements passes them between invocations",
        program,
        vec![filled(&ty, N, 3), filled(&ty, N, 200)],
    )]
}

/// Operators and shuffles take no bytes value: the reference fails where it evaluates one.
fn failures() -> Vec<Case> {
    let ty = i64_lanes();
    let eq = Expr::cast(
        DataType::U32,
        bin(BinOp::Eq, Expr::load("a", gid()), Expr::load("w", gid())),
    );
    let shuffle = shuffle(Expr::load("a", gid()), Expr::u32(0));
    vec![
        Case::new(
            "an operator on wide values fails",
            program(&ty, vec![Node::store("out", gid(), eq)]),
            inputs(&ty),
        )
        .failing(),
        Case::new(
            "a shuffle of wide values fails",
            program(&ty, vec![Node::store("w", gid(), shuffle)]),
            inputs(&ty),
        )
        .failing(),
    ]
}

pub fn wide_element_cases() -> Vec<Case> {
    let mut cases = copies();
    cases.extend(snapshots());
    cases.extend(conditions());
    cases.extend(subgroup_operands());
    cases.extend(workgroup());
    cases.extend(failures());
    cases
}
