//! Arbitrary — mostly invalid — programs for the emitter's no-panic harness: untyped
//! random trees over every `Node`/`Expr` variant and every element type, undeclared
//! names, duplicate bindings, absurd counts and workgroups, deep nesting, opaque
//! extensions; mutations of valid generated programs; and byte-level mutations pushed
//! through vyre's wire decoder.

use super::gen::{generate, GenConfig};
use super::rng::Rng;
use crate::common::extensions::{unknown_expr, unknown_node};
use std::sync::Arc;
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{
    AtomicOp, BinOp, BufferAccess, BufferDecl, CollectiveOp, CommGroup, DataType, Expr,
    MemoryOrdering, Node, Program, SubgroupReduceOp, UnOp,
};

/// A program plus the dispatch config to emit it with.
pub struct Arbitrary {
    pub program: Program,
    pub config: DispatchConfig,
    pub origin: &'static str,
}

fn all_types(rng: &mut Rng) -> DataType {
    match rng.below(24) {
        0 => DataType::U8,
        1 => DataType::U16,
        2 | 3 => DataType::U32,
        4 => DataType::I8,
        5 => DataType::I16,
        6 | 7 => DataType::I32,
        8 => DataType::I64,
        9 => DataType::U64,
        10 => DataType::Vec2U32,
        11 => DataType::Vec4U32,
        12 => DataType::Bool,
        13 => DataType::Bytes,
        14 => DataType::Array {
            element_size: rng.below(9) as usize,
        },
        15 => DataType::F16,
        16 => DataType::BF16,
        17 | 18 => DataType::F32,
        19 => DataType::F64,
        20 => DataType::Tensor,
        21 => DataType::Vec {
            element: Box::new(DataType::F32),
            count: rng.below(5) as u8,
        },
        _ => DataType::U32,
    }
}

const NAMES: &[&str] = &[
    "a",
    "b",
    "out",
    "sh",
    "x",
    "y",
    "i",
    "lin",
    "",
    "undeclared",
];

fn name(rng: &mut Rng) -> &'static str {
    NAMES[rng.below(NAMES.len() as u32) as usize]
}

const BINOPS: &[BinOp] = &[
    BinOp::Add,
    BinOp::Sub,
    BinOp::Mul,
    BinOp::Div,
    BinOp::Mod,
    BinOp::WrappingAdd,
    BinOp::WrappingSub,
    BinOp::BitAnd,
    BinOp::BitOr,
    BinOp::BitXor,
    BinOp::Shl,
    BinOp::Shr,
    BinOp::Eq,
    BinOp::Ne,
    BinOp::Lt,
    BinOp::Gt,
    BinOp::Le,
    BinOp::Ge,
    BinOp::And,
    BinOp::Or,
    BinOp::AbsDiff,
    BinOp::Min,
    BinOp::Max,
    BinOp::SaturatingAdd,
    BinOp::SaturatingSub,
    BinOp::SaturatingMul,
    BinOp::Shuffle,
    BinOp::Ballot,
    BinOp::WaveReduce,
    BinOp::WaveBroadcast,
    BinOp::RotateLeft,
    BinOp::RotateRight,
    BinOp::MulHigh,
];

fn unop(rng: &mut Rng) -> UnOp {
    use UnOp as U;
    rng.pick(&[
        U::Negate,
        U::BitNot,
        U::LogicalNot,
        U::Popcount,
        U::Clz,
        U::Ctz,
        U::ReverseBits,
        U::Cos,
        U::Sin,
        U::Abs,
        U::Sqrt,
        U::Floor,
        U::Ceil,
        U::Round,
        U::Trunc,
        U::Sign,
        U::IsNan,
        U::IsInf,
        U::IsFinite,
        U::Exp,
        U::Log,
        U::Log2,
        U::Exp2,
        U::Tan,
        U::Acos,
        U::Asin,
        U::Atan,
        U::Tanh,
        U::Sinh,
        U::Cosh,
        U::InverseSqrt,
        U::Unpack4Low,
        U::Unpack4High,
        U::Unpack8Low,
        U::Unpack8High,
        U::Reciprocal,
    ])
    .clone()
}

const ATOMICS: &[AtomicOp] = &[
    AtomicOp::Add,
    AtomicOp::Or,
    AtomicOp::And,
    AtomicOp::Xor,
    AtomicOp::Min,
    AtomicOp::Max,
    AtomicOp::Exchange,
    AtomicOp::CompareExchange,
    AtomicOp::CompareExchangeWeak,
    AtomicOp::FetchNand,
    AtomicOp::LruUpdate,
];

const ORDERINGS: &[MemoryOrdering] = &[
    MemoryOrdering::Relaxed,
    MemoryOrdering::Acquire,
    MemoryOrdering::Release,
    MemoryOrdering::AcqRel,
    MemoryOrdering::SeqCst,
    MemoryOrdering::GridSync,
];

fn b(e: Expr) -> Box<Expr> {
    Box::new(e)
}

fn expr(rng: &mut Rng, depth: u32) -> Expr {
    if depth == 0 || rng.chance(25) {
        return match rng.below(12) {
            0 => Expr::LitU32(rng.next_u32()),
            1 => Expr::LitI32(rng.next_u32() as i32),
            2 => Expr::LitF32(f32::from_bits(rng.next_u32())),
            3 => Expr::LitBool(rng.chance(50)),
            4 | 5 => Expr::Var(name(rng).into()),
            6 => Expr::BufLen {
                buffer: name(rng).into(),
            },
            7 => Expr::InvocationId {
                axis: rng.below(6) as u8,
            },
            8 => Expr::WorkgroupId {
                axis: rng.below(6) as u8,
            },
            9 => Expr::LocalId {
                axis: rng.below(6) as u8,
            },
            10 => Expr::SubgroupLocalId,
            _ => Expr::SubgroupSize,
        };
    }
    let d = depth - 1;
    match rng.below(16) {
        0 | 1 => Expr::Load {
            buffer: name(rng).into(),
            index: b(expr(rng, d)),
        },
        2..=4 => Expr::BinOp {
            op: *rng.pick(BINOPS),
            left: b(expr(rng, d)),
            right: b(expr(rng, d)),
        },
        5 | 6 => Expr::UnOp {
            op: unop(rng),
            operand: b(expr(rng, d)),
        },
        7 => Expr::Call {
            op_id: rng.pick(&["vyre.op", "", "x"])[..].into(),
            args: (0..rng.below(3)).map(|_| expr(rng, d)).collect(),
        },
        8 => Expr::Select {
            cond: b(expr(rng, d)),
            true_val: b(expr(rng, d)),
            false_val: b(expr(rng, d)),
        },
        9 | 10 => Expr::Cast {
            target: all_types(rng),
            value: b(expr(rng, d)),
        },
        11 => Expr::Fma {
            a: b(expr(rng, d)),
            b: b(expr(rng, d)),
            c: b(expr(rng, d)),
        },
        12 => Expr::Atomic {
            op: *rng.pick(ATOMICS),
            buffer: name(rng).into(),
            index: b(expr(rng, d)),
            expected: rng.chance(50).then(|| b(expr(rng, d))),
            value: b(expr(rng, d)),
            ordering: *rng.pick(ORDERINGS),
        },
        13 => match rng.below(3) {
            0 => Expr::SubgroupBallot {
                cond: b(expr(rng, d)),
            },
            1 => Expr::SubgroupShuffle {
                value: b(expr(rng, d)),
                lane: b(expr(rng, d)),
            },
            _ => Expr::SubgroupReduce {
                op: *rng.pick(&[
                    SubgroupReduceOp::Add,
                    SubgroupReduceOp::Mul,
                    SubgroupReduceOp::Min,
                    SubgroupReduceOp::Max,
                    SubgroupReduceOp::And,
                    SubgroupReduceOp::Or,
                    SubgroupReduceOp::Xor,
                ]),
                value: b(expr(rng, d)),
            },
        },
        14 => unknown_expr(DataType::U32),
        _ => expr(rng, 0),
    }
}

fn node(rng: &mut Rng, depth: u32) -> Node {
    let d = depth.saturating_sub(1);
    let e = |rng: &mut Rng| {
        let depth = rng.below(5);
        expr(rng, depth)
    };
    match rng.below(if depth == 0 { 8 } else { 26 }) {
        0..=2 => Node::Let {
            name: name(rng).into(),
            value: e(rng),
        },
        3 => Node::Assign {
            name: name(rng).into(),
            value: e(rng),
        },
        4..=6 => Node::Store {
            buffer: name(rng).into(),
            index: e(rng),
            value: e(rng),
        },
        7 => Node::Return,
        8 | 9 => Node::If {
            cond: e(rng),
            then: nodes(rng, d),
            otherwise: if rng.chance(50) {
                nodes(rng, d)
            } else {
                Vec::new()
            },
        },
        10 | 11 => Node::Loop {
            var: name(rng).into(),
            from: e(rng),
            to: e(rng),
            body: nodes(rng, d),
        },
        12 => Node::Barrier {
            ordering: *rng.pick(ORDERINGS),
        },
        13 => Node::Block(nodes(rng, d)),
        14 => Node::Region {
            generator: rng.pick(&["vyre.program.root", "r", ""])[..].into(),
            source_region: None,
            body: Arc::new(nodes(rng, d)),
        },
        15 => Node::IndirectDispatch {
            count_buffer: name(rng).into(),
            count_offset: u64::from(rng.below(9)),
        },
        16 => Node::AsyncLoad {
            source: name(rng).into(),
            destination: name(rng).into(),
            offset: b(e(rng)),
            size: b(e(rng)),
            tag: "t".into(),
        },
        17 => Node::AsyncStore {
            source: name(rng).into(),
            destination: name(rng).into(),
            offset: b(e(rng)),
            size: b(e(rng)),
            tag: "t".into(),
        },
        18 => Node::AsyncWait { tag: "t".into() },
        19 => Node::Trap {
            address: b(e(rng)),
            tag: "t".into(),
        },
        20 => Node::Resume { tag: "t".into() },
        21 => Node::AllReduce {
            buffer: name(rng).into(),
            op: *rng.pick(&[CollectiveOp::Sum, CollectiveOp::Min, CollectiveOp::BitXor]),
            group: CommGroup(rng.below(2)),
        },
        22 => Node::AllGather {
            input: name(rng).into(),
            output: name(rng).into(),
            group: CommGroup(rng.below(2)),
        },
        23 => Node::ReduceScatter {
            input: name(rng).into(),
            output: name(rng).into(),
            op: CollectiveOp::Max,
            group: CommGroup::WORLD,
        },
        24 => Node::Broadcast {
            buffer: name(rng).into(),
            root: rng.below(2),
            group: CommGroup::WORLD,
        },
        _ => unknown_node(),
    }
}

fn nodes(rng: &mut Rng, depth: u32) -> Vec<Node> {
    (0..rng.below(5)).map(|_| node(rng, depth)).collect()
}

fn buffers(rng: &mut Rng) -> Vec<BufferDecl> {
    let mut out = Vec::new();
    for _ in 0..rng.below(6) {
        let n = name(rng);
        let element = all_types(rng);
        let count = *rng.pick(&[0, 1, 3, 64, 1 << 20, 0x4000_0000, u32::MAX]);
        let decl = match rng.below(7) {
            0 => BufferDecl::read(n, rng.below(4), element),
            1 => BufferDecl::read_write(n, rng.below(4), element),
            2 => BufferDecl::output(n, rng.below(4), element),
            3 => BufferDecl::uniform(n, rng.below(4), element),
            4 => BufferDecl::workgroup(n, count, element),
            5 => BufferDecl::storage(n, rng.below(4), BufferAccess::WriteOnly, element),
            _ => BufferDecl::storage(n, rng.below(4), BufferAccess::Workgroup, element),
        };
        out.push(decl.with_count(count));
    }
    out
}

fn workgroup(rng: &mut Rng) -> [u32; 3] {
    *rng.pick(&[
        [1, 1, 1],
        [64, 1, 1],
        [0, 1, 1],
        [1, 0, 1],
        [1024, 1, 1],
        [1025, 1, 1],
        [32, 32, 1],
        [32, 32, 2],
        [u32::MAX, 1, 1],
        [65536, 65536, 1],
        [7, 3, 5],
    ])
}

fn config(rng: &mut Rng) -> DispatchConfig {
    let mut c = DispatchConfig::default();
    if rng.chance(10) {
        c.workgroup_override = Some(workgroup(rng));
    }
    c
}

#[allow(deprecated)]
fn assemble(rng: &mut Rng, buffers: Vec<BufferDecl>, wg: [u32; 3], entry: Vec<Node>) -> Program {
    if rng.chance(70) {
        Program::wrapped(buffers, wg, entry)
    } else {
        Program::from_raw_parts(buffers, wg, entry)
    }
}

/// An untyped random program over every IR variant.
pub fn random_program(seed: u64) -> Arbitrary {
    random_program_from(Rng::new(seed))
}

/// [`random_program`] drawing its choices from `rng`.
pub fn random_program_from(mut rng: Rng) -> Arbitrary {
    let bufs = buffers(&mut rng);
    let wg = workgroup(&mut rng);
    let depth = rng.below(4);
    let entry = nodes(&mut rng, depth);
    Arbitrary {
        program: assemble(&mut rng, bufs, wg, entry),
        config: config(&mut rng),
        origin: "random",
    }
}

/// Deeply nested statements or expressions around the emitter's nesting limit.
pub fn deep_program(seed: u64) -> Arbitrary {
    let mut rng = Rng::new(seed);
    let depth = *rng.pick(&[100u32, 300, 383, 384, 385, 500, 1500]);
    let mut e = Expr::LitU32(1);
    let mut body = vec![Node::Store {
        buffer: "out".into(),
        index: Expr::LitU32(0),
        value: Expr::LitU32(1),
    }];
    let statements = rng.chance(50);
    for _ in 0..depth {
        if statements {
            body = vec![match rng.below(4) {
                0 => Node::Block(body),
                1 => Node::If {
                    cond: Expr::LitBool(true),
                    then: body,
                    otherwise: Vec::new(),
                },
                2 => Node::Region {
                    generator: "r".into(),
                    source_region: None,
                    body: Arc::new(body),
                },
                _ => Node::Loop {
                    var: format!("i{}", rng.next_u32()).into(),
                    from: Expr::LitU32(0),
                    to: Expr::LitU32(1),
                    body,
                },
            }];
        } else {
            e = match rng.below(3) {
                0 => Expr::UnOp {
                    op: UnOp::BitNot,
                    operand: b(e),
                },
                1 => Expr::BinOp {
                    op: BinOp::Add,
                    left: b(e),
                    right: b(Expr::LitU32(1)),
                },
                _ => Expr::Cast {
                    target: DataType::U32,
                    value: b(e),
                },
            };
        }
    }
    if !statements {
        body = vec![Node::Store {
            buffer: "out".into(),
            index: Expr::LitU32(0),
            value: e,
        }];
    }
    Arbitrary {
        program: Program::wrapped(
            vec![BufferDecl::output("out", 0, DataType::U32).with_count(4)],
            [4, 1, 1],
            body,
        ),
        config: DispatchConfig::default(),
        origin: "deep",
    }
}

/// Replace the `n`-th expression (pre-order) with `f(old)`; returns false if there are
/// fewer expressions.
fn mutate_expr(nodes: &mut [Node], n: &mut u32, f: &mut dyn FnMut(&Expr) -> Expr) -> bool {
    fn in_expr(e: &mut Expr, n: &mut u32, f: &mut dyn FnMut(&Expr) -> Expr) -> bool {
        if *n == 0 {
            *e = f(e);
            return true;
        }
        *n -= 1;
        match e {
            Expr::Load { index, .. } => in_expr(index, n, f),
            Expr::BinOp { left, right, .. } => in_expr(left, n, f) || in_expr(right, n, f),
            Expr::UnOp { operand, .. } | Expr::Cast { value: operand, .. } => {
                in_expr(operand, n, f)
            }
            Expr::Select {
                cond,
                true_val,
                false_val,
            } => in_expr(cond, n, f) || in_expr(true_val, n, f) || in_expr(false_val, n, f),
            Expr::Fma { a, b, c } => in_expr(a, n, f) || in_expr(b, n, f) || in_expr(c, n, f),
            Expr::Atomic { index, value, .. } => in_expr(index, n, f) || in_expr(value, n, f),
            _ => false,
        }
    }
    for node in nodes.iter_mut() {
        let done = match node {
            Node::Let { value, .. } | Node::Assign { value, .. } => in_expr(value, n, f),
            Node::Store { index, value, .. } => in_expr(index, n, f) || in_expr(value, n, f),
            Node::If {
                cond,
                then,
                otherwise,
            } => in_expr(cond, n, f) || mutate_expr(then, n, f) || mutate_expr(otherwise, n, f),
            Node::Loop { from, to, body, .. } => {
                in_expr(from, n, f) || in_expr(to, n, f) || mutate_expr(body, n, f)
            }
            Node::Block(body) => mutate_expr(body, n, f),
            Node::Region { body, .. } => mutate_expr(Arc::make_mut(body).as_mut_slice(), n, f),
            _ => false,
        };
        if done {
            return true;
        }
    }
    false
}

/// A valid generated program with 1-3 targeted breakages.
pub fn mutated_program(seed: u64) -> Arbitrary {
    mutated_program_from(Rng::new(seed))
}

/// [`mutated_program`] drawing its choices from `rng`.
pub fn mutated_program_from(mut rng: Rng) -> Arbitrary {
    let case = generate(rng.next_u64(), &GenConfig::default()).case;
    let mut bufs = case.program.buffers().to_vec();
    let mut wg = case.program.workgroup_size();
    let mut entry = match case.program.entry() {
        [Node::Region { body, .. }] => (**body).clone(),
        other => other.to_vec(),
    };
    for _ in 0..rng.range(1, 3) {
        match rng.below(8) {
            0 => {
                // Change a buffer's element type, access or count.
                if !bufs.is_empty() {
                    let i = rng.below(bufs.len() as u32) as usize;
                    let d = bufs[i].clone();
                    bufs[i] = match rng.below(3) {
                        0 => BufferDecl::storage(
                            d.name(),
                            d.binding(),
                            d.access(),
                            all_types(&mut rng),
                        )
                        .with_count(d.count()),
                        1 => d.with_count(*rng.pick(&[0, 1, u32::MAX, 0x4000_0000])),
                        _ => BufferDecl::storage(
                            d.name(),
                            d.binding(),
                            rng.pick(&[
                                BufferAccess::ReadOnly,
                                BufferAccess::ReadWrite,
                                BufferAccess::Uniform,
                                BufferAccess::WriteOnly,
                                BufferAccess::Workgroup,
                            ])
                            .clone(),
                            d.element(),
                        )
                        .with_count(d.count()),
                    };
                }
            }
            1 => {
                if !bufs.is_empty() {
                    let i = rng.below(bufs.len() as u32) as usize;
                    bufs.remove(i);
                }
            }
            2 => wg = workgroup(&mut rng),
            3 => {
                // Delete a statement (often a Let, leaving its uses undeclared).
                if !entry.is_empty() {
                    let i = rng.below(entry.len() as u32) as usize;
                    entry.remove(i);
                }
            }
            4 => {
                // Duplicate a statement (duplicate bindings).
                if !entry.is_empty() {
                    let i = rng.below(entry.len() as u32) as usize;
                    let n = entry[i].clone();
                    entry.insert(i, n);
                }
            }
            5 => entry.insert(
                rng.below(entry.len() as u32 + 1) as usize,
                node(&mut rng, 2),
            ),
            _ => {
                // Replace an expression with a random (ill-typed) one, or retype it.
                let mut n = rng.below(40);
                let fresh = expr(&mut rng, 2);
                let target = all_types(&mut rng);
                let retype = rng.chance(50);
                mutate_expr(&mut entry, &mut n, &mut |old| {
                    if retype {
                        Expr::Cast {
                            target: target.clone(),
                            value: Box::new(old.clone()),
                        }
                    } else {
                        fresh.clone()
                    }
                });
            }
        }
    }
    Arbitrary {
        program: assemble(&mut rng, bufs, wg, entry),
        config: config(&mut rng),
        origin: "mutated",
    }
}

/// Bytes for vyre's wire decoder: a valid program's encoding with random byte edits in
/// its body and the integrity digest recomputed (so the decoder parses the body).
pub fn wire_bytes(seed: u64) -> Vec<u8> {
    wire_bytes_from(Rng::new(seed))
}

/// [`wire_bytes`] drawing its choices from `rng`.
pub fn wire_bytes_from(mut rng: Rng) -> Vec<u8> {
    let case = generate(rng.next_u64(), &GenConfig::default()).case;
    let mut bytes = case.program.to_wire().unwrap_or_default();
    const HEADER: usize = 40;
    if bytes.len() <= HEADER {
        return bytes;
    }
    for _ in 0..rng.range(1, 6) {
        let at = HEADER + rng.below((bytes.len() - HEADER) as u32) as usize;
        match rng.below(5) {
            0 => bytes[at] = rng.next_u32() as u8,
            1 => bytes[at] ^= 1 << rng.below(8),
            2 => {
                bytes.truncate(at);
            }
            3 => {
                let extra: Vec<u8> = (0..rng.below(8)).map(|_| rng.next_u32() as u8).collect();
                bytes.splice(at..at, extra);
            }
            _ => bytes[at] = *rng.pick(&[0u8, 0xFF, 0x7F, 0x80]),
        }
        if bytes.len() <= HEADER {
            break;
        }
    }
    if bytes.len() > HEADER {
        let digest = blake3::hash(&bytes[HEADER..]);
        bytes[8..HEADER].copy_from_slice(digest.as_bytes());
    }
    bytes
}
