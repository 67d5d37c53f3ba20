//! The multi-rank oracle of issue 19 (`common::multirank`), on the CPU: at W = 1 it is
//! byte-identical to vyre-reference's own single-rank run; at W = 2 and 4 every
//! collective matches hand-computed results (rank-order folds, floats folded left to
//! right with the reference's NaN and subnormal rules); misplaced collectives and shape
//! violations are errors.

mod common;

use common::gpu::{f32_bytes, u32_bytes};
use common::multirank::reference_ranks;
use vyre_foundation::ir::{
    BinOp, BufferDecl, CollectiveOp, CommGroup, DataType, Expr, MemoryOrdering, Node, Program,
};

const N: u32 = 100;
const OPS: [CollectiveOp; 6] = [
    CollectiveOp::Sum,
    CollectiveOp::Min,
    CollectiveOp::Max,
    CollectiveOp::BitAnd,
    CollectiveOp::BitOr,
    CollectiveOp::BitXor,
];

fn gid() -> Expr {
    Expr::gid_x()
}

fn bin(op: BinOp, left: Expr, right: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(left),
        right: Box::new(right),
    }
}

/// `if gid < len(buffer) { buffer[gid] = value }`.
fn update(buffer: &str, value: Expr) -> Node {
    Node::if_then(
        Expr::lt(gid(), Expr::buf_len(buffer)),
        vec![Node::store(buffer, gid(), value)],
    )
}

fn wrapped(buffers: Vec<BufferDecl>, entry: Vec<Node>) -> Program {
    Program::wrapped(buffers, [64, 1, 1], entry)
}

fn all_reduce(buffer: &str, op: CollectiveOp) -> Node {
    Node::AllReduce {
        buffer: buffer.into(),
        op,
        group: CommGroup::WORLD,
    }
}

fn broadcast(buffer: &str, root: u32) -> Node {
    Node::Broadcast {
        buffer: buffer.into(),
        root,
        group: CommGroup::WORLD,
    }
}

fn all_gather() -> Node {
    Node::AllGather {
        input: "src".into(),
        output: "out".into(),
        group: CommGroup::WORLD,
    }
}

fn reduce_scatter(op: CollectiveOp) -> Node {
    Node::ReduceScatter {
        input: "src".into(),
        output: "out".into(),
        op,
        group: CommGroup::WORLD,
    }
}

/// A program that is one collective on one read-write buffer of `count` elements.
fn bare(element: DataType, count: u32, node: Node) -> Program {
    wrapped(
        vec![BufferDecl::read_write("buf", 0, element).with_count(count)],
        vec![node],
    )
}

/// `src[gid] += 10; <node>(src -> out); out[gid] += 1` over u32.
fn copy_program(node: Node, src: u32, out: u32) -> Program {
    wrapped(
        vec![
            BufferDecl::read_write("src", 0, DataType::U32).with_count(src),
            BufferDecl::output("out", 1, DataType::U32).with_count(out),
        ],
        vec![
            update("src", Expr::add(Expr::load("src", gid()), Expr::u32(10))),
            node,
            update("out", Expr::add(Expr::load("out", gid()), Expr::u32(1))),
        ],
    )
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn i32_bytes(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn u64_bytes(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn ranks_of(per_rank: Vec<Vec<u8>>) -> Vec<Vec<Vec<u8>>> {
    per_rank.into_iter().map(|bytes| vec![bytes]).collect()
}

/// The oracle's first output, which every rank must hold alike.
fn common_output(program: &Program, per_rank: Vec<Vec<u8>>) -> Vec<u8> {
    common_output_at(program, per_rank, 0)
}

/// The oracle's output `index`, which every rank must hold alike.
fn common_output_at(program: &Program, per_rank: Vec<Vec<u8>>, index: usize) -> Vec<u8> {
    let results = reference_ranks(program, &ranks_of(per_rank)).expect("the oracle runs it");
    for rank in &results {
        assert_eq!(
            rank[index], results[0][index],
            "every rank holds the same result"
        );
    }
    results[0][index].clone()
}

fn oracle_error(program: &Program, per_rank: Vec<Vec<u8>>) -> String {
    match reference_ranks(program, &ranks_of(per_rank)) {
        Ok(_) => panic!("the oracle must reject it"),
        Err(error) => error,
    }
}

/// Programs for one rank, with inputs: mostly compute -> collective -> compute, per
/// element, plus a lone collective, none, and a grid-width case. Collectives are WORLD,
/// root 0, with shapes that hold at W = 1, where the reference's single-rank lowering
/// and the oracle's semantics coincide.
fn single_rank_cases() -> Vec<(&'static str, Program, Vec<Vec<u8>>)> {
    let words: Vec<u32> = (0..N).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    let mut floats: Vec<f32> = (0..N).map(|i| i as f32 * 0.75 - 20.0).collect();
    floats[3] = f32::from_bits(0x7fa0_0001); // a NaN payload AllReduce must keep at W = 1
                                             // The copy collectives sit two scopes deep (a Block, then copy_program's Region),
                                             // so the oracle has to dissolve both to find them.
    let nested = |node| {
        let program = copy_program(node, N, N);
        program.with_rewritten_wrapped_entry(vec![
            update("src", Expr::mul(Expr::load("src", gid()), Expr::u32(3))),
            Node::block(program.entry().to_vec()),
        ])
    };
    let f32_buf = BufferDecl::read_write("buf", 0, DataType::F32).with_count(N);
    vec![
        (
            "all_reduce_sum_u32",
            wrapped(
                vec![BufferDecl::read_write("buf", 0, DataType::U32).with_count(N)],
                vec![
                    update("buf", Expr::add(Expr::load("buf", gid()), Expr::u32(1))),
                    all_reduce("buf", CollectiveOp::Sum),
                    update("buf", Expr::mul(Expr::load("buf", gid()), Expr::u32(3))),
                ],
            ),
            vec![u32_bytes(&words)],
        ),
        (
            "all_reduce_max_f32_keeps_nan",
            bare(DataType::F32, N, all_reduce("buf", CollectiveOp::Max)),
            vec![f32_bytes(&floats)],
        ),
        (
            "broadcast_root0_f32",
            wrapped(
                vec![f32_buf],
                vec![
                    update("buf", Expr::mul(Expr::load("buf", gid()), Expr::f32(2.0))),
                    broadcast("buf", 0),
                    update("buf", Expr::add(Expr::load("buf", gid()), Expr::f32(0.5))),
                ],
            ),
            vec![f32_bytes(&floats)],
        ),
        (
            "all_gather_u32",
            nested(all_gather()),
            vec![u32_bytes(&words)],
        ),
        (
            "reduce_scatter_max_u32",
            nested(reduce_scatter(CollectiveOp::Max)),
            vec![u32_bytes(&words)],
        ),
        (
            "no_collective",
            wrapped(
                vec![BufferDecl::read_write("buf", 0, DataType::U32).with_count(N)],
                vec![update(
                    "buf",
                    Expr::add(Expr::load("buf", gid()), Expr::u32(1)),
                )],
            ),
            vec![u32_bytes(&words)],
        ),
        (
            "atomics_widen_every_segment",
            atomic_grid_program(),
            vec![u32_bytes(&(0..512).collect::<Vec<u32>>()), vec![0; 4]],
        ),
    ]
}

/// Atomics make the reference dispatch over the largest input (512 here, outputs hold
/// 256); the segment after the collective has none, yet must run on that same grid:
/// `wide[i] = 256 + i` only if invocations 256..512 exist there.
fn atomic_grid_program() -> Program {
    wrapped(
        vec![
            BufferDecl::read("src", 0, DataType::U32).with_count(512),
            BufferDecl::read_write("odd", 1, DataType::U32).with_count(1),
            BufferDecl::output("wide", 2, DataType::U32).with_count(256),
        ],
        vec![
            Node::if_then(
                Expr::lt(gid(), Expr::buf_len("src")),
                vec![Node::let_bind(
                    "old",
                    Expr::atomic_add(
                        "odd",
                        Expr::u32(0),
                        bin(BinOp::BitAnd, Expr::load("src", gid()), Expr::u32(1)),
                    ),
                )],
            ),
            all_reduce("odd", CollectiveOp::Sum),
            Node::Barrier {
                ordering: MemoryOrdering::GridSync,
            },
            Node::if_then(
                bin(BinOp::Ge, gid(), Expr::u32(256)),
                vec![Node::store(
                    "wide",
                    bin(BinOp::Sub, gid(), Expr::u32(256)),
                    gid(),
                )],
            ),
        ],
    )
}

#[test]
fn one_rank_equals_the_reference_byte_for_byte() {
    let cases = single_rank_cases();
    for (name, program, inputs) in &cases {
        let want = common::gpu::reference(program, inputs)
            .unwrap_or_else(|e| panic!("{name}: the reference fails: {e}"));
        let got = reference_ranks(program, std::slice::from_ref(inputs))
            .unwrap_or_else(|e| panic!("{name}: the oracle fails: {e}"));
        assert_eq!(got, vec![want], "{name}");
    }
    let (_, program, inputs) = cases
        .iter()
        .find(|c| c.0 == "atomics_widen_every_segment")
        .unwrap();
    let wide = &reference_ranks(program, std::slice::from_ref(inputs)).unwrap()[0];
    assert_eq!(u32s(&wide[0]), vec![256], "odd count, folded once");
    assert_eq!(u32s(&wide[1]), (256..512).collect::<Vec<u32>>());
}

/// Rank r's words for the op sweep: edge values (wrap-around, sign bits) varied by rank.
fn sweep_words(world: usize) -> Vec<Vec<u32>> {
    let base = [0xffff_ffff, 5, 0xf0f0_0000, 8, 0x8000_0001, 0];
    (0..world)
        .map(|r| {
            base.iter()
                .enumerate()
                .map(|(i, b)| {
                    b ^ (r as u32 + 1)
                        .wrapping_mul(0x1357_9bdf)
                        .rotate_left(i as u32 * 5)
                })
                .collect()
        })
        .collect()
}

/// An independent host fold, for the sweep only (the literal cases pin the semantics).
fn host_fold(op: CollectiveOp, signed: bool, a: u32, b: u32) -> u32 {
    let (sa, sb) = (a as i32, b as i32);
    match op {
        CollectiveOp::Sum => a.wrapping_add(b),
        CollectiveOp::Min if signed => sa.min(sb) as u32,
        CollectiveOp::Max if signed => sa.max(sb) as u32,
        CollectiveOp::Min => a.min(b),
        CollectiveOp::Max => a.max(b),
        CollectiveOp::BitAnd => a & b,
        CollectiveOp::BitOr => a | b,
        CollectiveOp::BitXor => a ^ b,
        other => panic!("{other:?}"),
    }
}

#[test]
fn all_reduce_every_op_on_u32_and_i32() {
    for world in [2, 4] {
        let words = sweep_words(world);
        for (element, signed) in [(DataType::U32, false), (DataType::I32, true)] {
            for op in OPS {
                let program = bare(element.clone(), 6, all_reduce("buf", op));
                let got = common_output(&program, words.iter().map(|w| u32_bytes(w)).collect());
                let want: Vec<u32> = (0..6)
                    .map(|i| {
                        let mut acc = words[0][i];
                        for rank in &words[1..] {
                            acc = host_fold(op, signed, acc, rank[i]);
                        }
                        acc
                    })
                    .collect();
                assert_eq!(u32s(&got), want, "W = {world}, {element}, {op:?}");
            }
        }
    }
}

#[test]
fn integer_folds_wrap_and_respect_signedness() {
    let sum = bare(DataType::U32, 2, all_reduce("buf", CollectiveOp::Sum));
    let got = common_output(&sum, vec![u32_bytes(&[0xffff_ffff, 7]), u32_bytes(&[2, 9])]);
    assert_eq!(u32s(&got), vec![1, 16]);
    let ranks = vec![
        i32_bytes(&[-5, 1]),
        i32_bytes(&[3, -2]),
        i32_bytes(&[-7, 4]),
        i32_bytes(&[0, -8]),
    ];
    let signed = bare(DataType::I32, 2, all_reduce("buf", CollectiveOp::Min));
    assert_eq!(common_output(&signed, ranks.clone()), i32_bytes(&[-7, -8]));
    let unsigned = bare(DataType::U32, 2, all_reduce("buf", CollectiveOp::Min));
    assert_eq!(common_output(&unsigned, ranks.clone()), i32_bytes(&[0, 1]));
    let sum = bare(DataType::I32, 2, all_reduce("buf", CollectiveOp::Sum));
    assert_eq!(common_output(&sum, ranks), i32_bytes(&[-9, -5]));
}

#[test]
fn f32_sum_folds_left_to_right_in_rank_order() {
    let values = [1e8f32, 1.0, -1e8, 1.0];
    let left = ((values[0] + values[1]) + values[2]) + values[3];
    let tree = (values[0] + values[1]) + (values[2] + values[3]);
    assert_eq!((left, tree), (1.0, 0.0), "the order is visible in f32");
    let program = bare(DataType::F32, 1, all_reduce("buf", CollectiveOp::Sum));
    let got = common_output(&program, values.iter().map(|v| f32_bytes(&[*v])).collect());
    assert_eq!(got, f32_bytes(&[1.0]), "rank order, left to right");
    let reversed = values.iter().rev().map(|v| f32_bytes(&[*v])).collect();
    assert_eq!(common_output(&program, reversed), f32_bytes(&[0.0]));
}

/// Left folds of `values` in every rank order: `5 + 1e8` rounds up to 100000008, and
/// adding 4 then ties to even at 100000016, which no other order (bar swapping the
/// commutative first pair) and no tree reaches; so only the rank-order left fold passes.
#[test]
fn f32_sum_rank_order_is_the_only_order_that_fits() {
    let values = [3.0f32, 2.0, 1e8, 4.0];
    let fold = |order: [usize; 4]| {
        order
            .iter()
            .skip(1)
            .fold(values[order[0]], |a, &i| a + values[i])
    };
    let want = fold([0, 1, 2, 3]);
    assert_eq!(want, 100_000_016.0);
    for a in 0..4 {
        for b in (0..4).filter(|&b| b != a) {
            for c in (0..4).filter(|&c| c != a && c != b) {
                let order = [a, b, c, 6 - a - b - c];
                let same = order == [0, 1, 2, 3] || order == [1, 0, 2, 3];
                assert_eq!(fold(order) == want, same, "{order:?}");
            }
        }
    }
    assert_ne!((values[0] + values[1]) + (values[2] + values[3]), want);
    let program = bare(DataType::F32, 1, all_reduce("buf", CollectiveOp::Sum));
    let got = common_output(&program, values.iter().map(|v| f32_bytes(&[*v])).collect());
    assert_eq!(got, f32_bytes(&[want]));
}

#[test]
fn f32_folds_canonicalise_nan_and_flush_subnormals() {
    let rank0 = f32_bytes(&[f32::from_bits(0x7fa0_0001), 1e-40, 3.0]);
    let rank1 = f32_bytes(&[2.0, 0.0, -1.5]);
    let fold = |op| {
        let program = bare(DataType::F32, 3, all_reduce("buf", op));
        common_output(&program, vec![rank0.clone(), rank1.clone()])
    };
    let sum = fold(CollectiveOp::Sum);
    assert_eq!(u32s(&sum), vec![0x7fc0_0000, 0, 1.5f32.to_bits()]);
    assert_eq!(fold(CollectiveOp::Min), f32_bytes(&[2.0, 0.0, -1.5]));
    assert_eq!(fold(CollectiveOp::Max), f32_bytes(&[2.0, 0.0, 3.0]));
    let program = bare(DataType::F32, 3, all_reduce("buf", CollectiveOp::BitXor));
    let error = oracle_error(&program, vec![rank0, rank1]);
    assert!(error.contains("BitXor") && error.contains("f32"), "{error}");
}

#[test]
fn u64_and_f16_folds() {
    let ranks = vec![u64_bytes(&[0xffff_ffff, 1 << 40]), u64_bytes(&[1, 5])];
    let fold = |op| {
        common_output(
            &bare(DataType::U64, 2, all_reduce("buf", op)),
            ranks.clone(),
        )
    };
    assert_eq!(
        fold(CollectiveOp::Sum),
        u64_bytes(&[1 << 32, (1 << 40) + 5])
    );
    assert_eq!(fold(CollectiveOp::Max), u64_bytes(&[0xffff_ffff, 1 << 40]));
    assert_eq!(fold(CollectiveOp::Min), u64_bytes(&[1, 5]));
    assert_eq!(
        fold(CollectiveOp::BitXor),
        u64_bytes(&[0xffff_fffe, (1 << 40) | 5])
    );
    // The same bits as I64 and U64: Min compares signed, then unsigned.
    let ranks = vec![u64_bytes(&[u64::MAX, 1]), u64_bytes(&[2, (-3i64) as u64])];
    let min = |element| {
        let program = bare(element, 2, all_reduce("buf", CollectiveOp::Min));
        common_output(&program, ranks.clone())
    };
    assert_eq!(min(DataType::I64), u64_bytes(&[u64::MAX, (-3i64) as u64]));
    assert_eq!(min(DataType::U64), u64_bytes(&[2, 1]));
    // f16 2048 (0x6800) + 1.0 (0x3c00) is a tie that rounds to even, 2048, at every step;
    // a tree order would reach 2048 + 2 = 2050 (0x6801).
    let program = bare(DataType::F16, 1, all_reduce("buf", CollectiveOp::Sum));
    let halves = [0x6800u16, 0x3c00, 0x3c00, 0x3c00];
    let got = common_output(
        &program,
        halves.iter().map(|h| h.to_le_bytes().to_vec()).collect(),
    );
    assert_eq!(got, 0x6800u16.to_le_bytes());
}

#[test]
fn broadcast_copies_a_nonzero_root() {
    for (world, root) in [(2usize, 1u32), (4, 3)] {
        let program = wrapped(
            vec![BufferDecl::read_write("buf", 0, DataType::U32).with_count(3)],
            vec![
                update("buf", Expr::mul(Expr::load("buf", gid()), Expr::u32(2))),
                broadcast("buf", root),
                update("buf", Expr::add(Expr::load("buf", gid()), Expr::u32(1))),
            ],
        );
        let per_rank = (0..world as u32)
            .map(|r| u32_bytes(&[r, 10 + r, 100 + r]))
            .collect();
        let r = root;
        let want = u32_bytes(&[2 * r + 1, 2 * (10 + r) + 1, 2 * (100 + r) + 1]);
        assert_eq!(common_output(&program, per_rank), want, "W = {world}");
    }
}

#[test]
fn all_gather_concatenates_in_rank_order() {
    let program = copy_program(all_gather(), 3, 6);
    let ranks = vec![u32_bytes(&[1, 2, 3]), u32_bytes(&[7, 8, 9])];
    let got = common_output_at(&program, ranks, 1);
    assert_eq!(u32s(&got), vec![12, 13, 14, 18, 19, 20]);
    let program = copy_program(all_gather(), 2, 8);
    let per_rank = (0..4).map(|r| u32_bytes(&[r, 100 * r])).collect();
    let got = common_output_at(&program, per_rank, 1);
    assert_eq!(u32s(&got), vec![11, 11, 12, 111, 13, 211, 14, 311]);
}

#[test]
fn reduce_scatter_gives_each_rank_its_folded_block() {
    let program = copy_program(reduce_scatter(CollectiveOp::Sum), 4, 2);
    let ranks = vec![u32_bytes(&[1, 2, 3, 4]), u32_bytes(&[10, 20, 30, 40])];
    let results = reference_ranks(&program, &ranks_of(ranks)).unwrap();
    // src += 10 first, so the folded input is [31, 42, 53, 64], then out += 1.
    assert_eq!(u32s(&results[0][1]), vec![32, 43]);
    assert_eq!(u32s(&results[1][1]), vec![54, 65]);
    let program = copy_program(reduce_scatter(CollectiveOp::Max), 8, 2);
    let per_rank = (0..4u32)
        .map(|r| u32_bytes(&(0..8).map(|i| (i * 7 + r * 5) % 11).collect::<Vec<_>>()))
        .collect();
    let results = reference_ranks(&program, &ranks_of(per_rank)).unwrap();
    let outs: Vec<Vec<u32>> = results.iter().map(|rank| u32s(&rank[1])).collect();
    assert_eq!(
        outs,
        vec![vec![21, 18], vec![19, 21], vec![21, 18], vec![20, 21]]
    );
}

#[test]
fn the_segment_after_all_reduce_reads_the_reduced_buffer() {
    // y[i] = x[(i + 1) % N] + 1 reads a neighbour another workgroup reduced: only a
    // whole-grid barrier at the AllReduce makes it the reduced value.
    let program = wrapped(
        vec![
            BufferDecl::read_write("x", 0, DataType::U32).with_count(N),
            BufferDecl::output("y", 1, DataType::U32).with_count(N),
        ],
        vec![Node::block(vec![
            update("x", Expr::mul(Expr::load("x", gid()), Expr::u32(2))),
            all_reduce("x", CollectiveOp::Sum),
            update(
                "y",
                Expr::add(
                    Expr::load(
                        "x",
                        bin(BinOp::Mod, Expr::add(gid(), Expr::u32(1)), Expr::u32(N)),
                    ),
                    Expr::u32(1),
                ),
            ),
        ])],
    );
    for world in [2u32, 4] {
        let per_rank: Vec<Vec<Vec<u8>>> = (0..world)
            .map(|r| vec![u32_bytes(&(0..N).map(|i| i + 1000 * r).collect::<Vec<_>>())])
            .collect();
        let results = reference_ranks(&program, &per_rank).unwrap();
        let reduced = |i: u32| (0..world).map(|r| 2 * (i + 1000 * r)).sum::<u32>();
        let want_x: Vec<u32> = (0..N).map(reduced).collect();
        let want_y: Vec<u32> = (0..N).map(|i| reduced((i + 1) % N) + 1).collect();
        for rank in &results {
            assert_eq!(u32s(&rank[0]), want_x, "W = {world}");
            assert_eq!(u32s(&rank[1]), want_y, "W = {world}");
        }
    }
}

#[test]
fn misplaced_collectives_and_bad_shapes_are_errors() {
    let two = |bytes: Vec<u8>| vec![bytes.clone(), bytes];
    let nested = [
        Node::if_then(
            Expr::lt(gid(), Expr::u32(1)),
            vec![all_reduce("buf", CollectiveOp::Sum)],
        ),
        Node::loop_for("k", Expr::u32(0), Expr::u32(2), vec![broadcast("buf", 0)]),
    ];
    for node in nested {
        let error = oracle_error(&bare(DataType::U32, 4, node), two(vec![0; 16]));
        assert!(error.contains("inside If or Loop"), "{error}");
    }
    let gather = copy_program(all_gather(), 3, 5);
    let error = oracle_error_pair(&gather, 3);
    assert!(
        error.contains("AllGather output") && error.contains("needs 24"),
        "{error}"
    );
    let scatter = copy_program(reduce_scatter(CollectiveOp::Sum), 3, 2);
    let error = oracle_error_pair(&scatter, 3);
    assert!(
        error.contains("ReduceScatter input") && error.contains("needs 16"),
        "{error}"
    );
    let root = bare(DataType::U32, 4, broadcast("buf", 2));
    let error = oracle_error(&root, two(vec![0; 16]));
    assert!(
        error.contains("root 2") && error.contains("world of 2"),
        "{error}"
    );
    let group = bare(
        DataType::U32,
        4,
        Node::AllReduce {
            buffer: "buf".into(),
            op: CollectiveOp::Sum,
            group: CommGroup(1),
        },
    );
    assert!(oracle_error(&group, two(vec![0; 16])).contains("CommGroup(1)"));
    let uneven = bare(DataType::U32, 0, all_reduce("buf", CollectiveOp::Sum));
    let error = oracle_error(&uneven, vec![vec![0; 16], vec![0; 12]]);
    assert!(error.contains("rank 1 binds 12 bytes"), "{error}");
    assert!(reference_ranks(&uneven, &[])
        .unwrap_err()
        .contains("no ranks"));
}

/// The oracle's error for a copy program at W = 2 whose `src` has `count` elements.
fn oracle_error_pair(program: &Program, count: u32) -> String {
    let src = u32_bytes(&(0..count).collect::<Vec<_>>());
    oracle_error(program, vec![src.clone(), src])
}
