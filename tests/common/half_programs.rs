//! F16/BF16 semantic cases (vyre-reference 0.7): loads widen to f32, operators compute in
//! f32, stores and casts round, and an out-of-bounds load is raw bytes that float
//! operators reject. Appended after every other semantic case, so the PTX snapshot names
//! (`semantic-<index>-...`) of the cases before them stay put.

#![allow(dead_code)]

use super::gpu::{f32_bytes, u32_bytes, Rng};
use super::programs::Case;
use vyre_foundation::ir::{
    BinOp, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program, SubgroupReduceOp,
};

const N: u32 = 128;

fn gid() -> Expr {
    Expr::InvocationId { axis: 0 }
}

fn ld(buffer: &str) -> Expr {
    Expr::load(buffer, gid())
}

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

fn cast(target: DataType, v: Expr) -> Expr {
    Expr::Cast {
        target,
        value: Box::new(v),
    }
}

/// `body` for every invocation below `N`, over the given buffers.
fn program(buffers: Vec<BufferDecl>, body: Vec<Node>) -> Program {
    Program::wrapped(
        buffers,
        [64, 1, 1],
        vec![Node::if_then(bin(BinOp::Lt, gid(), Expr::u32(N)), body)],
    )
}

fn input(name: &str, binding: u32, ty: DataType, count: u32) -> BufferDecl {
    BufferDecl::read(name, binding, ty).with_count(count)
}

fn output(name: &str, binding: u32, ty: DataType) -> BufferDecl {
    BufferDecl::output(name, binding, ty).with_count(N)
}

fn name(ty: &DataType) -> &'static str {
    if *ty == DataType::F16 {
        "f16"
    } else {
        "bf16"
    }
}

/// Every class of 16-bit pattern of `ty` (zeros, subnormals, normals, the largest finite,
/// infinities, NaNs with payloads and both signs), then random ones: `N` elements.
pub fn half_bits(ty: &DataType, rng: &mut Rng) -> Vec<u8> {
    let f16 = [
        0x0000u16, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x8400, 0x3C00, 0xBC00, 0x3C01,
        0x3555, 0x4248, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7FFF,
        0xFFFF, 0x7D55, 0x0200, 0x1400,
    ];
    let bf16 = [
        0x0000u16, 0x8000, 0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080, 0x3F80, 0xBF80, 0x3F81,
        0x3EAB, 0x4049, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FFF,
        0xFFFF, 0x7FA5, 0x0040, 0x3A00,
    ];
    let edges: &[u16] = if *ty == DataType::F16 { &f16 } else { &bf16 };
    (0..N as usize)
        .map(|i| match edges.get(i) {
            Some(&bits) => bits,
            None => rng.next_u32() as u16,
        })
        .flat_map(u16::to_le_bytes)
        .collect()
}

/// f32 values around every rounding boundary of f16 and bf16 (ties both ways, the
/// overflow threshold, the subnormal range, the underflow-to-zero threshold), NaNs,
/// infinities and f32 subnormals, then random ones: `N` elements.
pub fn rounding_f32(rng: &mut Rng) -> Vec<u8> {
    let edges = [
        0x0000_0000u32,
        0x8000_0000,
        0x0000_0001,
        0x8040_0000,
        0x3F80_0000,
        0x3F80_1000, // 1 + 2^-11: f16 tie, to even (down)
        0x3F80_3000, // f16 tie, to even (up)
        0x3F80_1001,
        0x3F80_8000, // bf16 tie, to even (down)
        0x3F81_8000, // bf16 tie, to even (up)
        0x3F80_8001,
        0x477F_E000, // 65504, the largest f16
        0x477F_EFFF, // just below the f16 overflow threshold
        0x477F_F000, // 65520: f16 tie to infinity
        0xC77F_F000,
        0x4780_0000, // 65536
        0x7F7F_FFFF, // bf16 rounds to infinity
        0x7F7F_7FFF,
        0x7F7F_8000,
        0xFF7F_FFFF,
        0x3880_0000, // 2^-14, the smallest normal f16
        0x387F_E000, // the largest subnormal f16
        0x387F_F000, // rounds up to the smallest normal f16
        0x3380_0000, // 2^-24, the smallest subnormal f16
        0x3300_0000, // 2^-25: tie, to even (zero)
        0x3300_0001, // rounds up to 2^-24
        0x32FF_FFFF, // rounds to zero
        0xB300_0001,
        0x33C0_0000, // 1.5 * 2^-24: tie, to even (2^-23)
        0x0080_0000, // the smallest normal f32
        0x0080_8000,
        0x8080_8000,
        0x7F80_0000,
        0xFF80_0000,
        0x7FC0_0000,
        0xFFC0_0000,
        0x7F80_0001,
        0xFFBF_FFFF,
        0x7FFF_FFFF,
    ];
    let values: Vec<u32> = (0..N as usize)
        .map(|i| match edges.get(i) {
            Some(&bits) => bits,
            // Random values of every sign and an exponent around the f16 range.
            None => {
                let raw = rng.next_u32();
                (raw & 0x807F_FFFF) | ((raw % 60 + 97) << 23)
            }
        })
        .collect();
    u32_bytes(&values)
}

/// Random f32 values of magnitude within the f16 range.
fn moderate_f32(rng: &mut Rng) -> Vec<u8> {
    let values: Vec<f32> = (0..N)
        .map(|_| (rng.next_u32() as i32 as f32) / 2_147_483_648.0 * 300.0)
        .collect();
    f32_bytes(&values)
}

/// Every F16/BF16 semantic case. vyre's validator types a half expression as its
/// format (`f16 * f16` is an `f16`, `f16 + f32` a `u32`) and stores only values of the
/// element's type, so f32 values reach half buffers through `Cast` or half arithmetic.
pub fn half_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for ty in [DataType::F16, DataType::BF16] {
        cases.extend(conversion_cases(&ty));
        cases.extend(arithmetic_cases(&ty));
        cases.extend(out_of_bounds_cases(&ty));
    }
    cases.extend(mixed_cases());
    cases.extend(subgroup_cases());
    cases
}

/// Loads, stores and casts of one format.
fn conversion_cases(ty: &DataType) -> Vec<Case> {
    let mut rng = Rng::new(16);
    let t = name(ty);
    let halves = half_bits(ty, &mut rng);
    let floats = rounding_f32(&mut rng);
    let from = |source: DataType, out: DataType, value: Expr| {
        program(
            vec![input("a", 0, source, N), output("out", 1, out)],
            vec![Node::store("out", gid(), value)],
        )
    };
    let to_f32 = |v: Expr| cast(DataType::F32, v);
    let to_half = |v: Expr| cast(ty.clone(), v);
    vec![
        Case::new(
            format!("{t} load stored back to {t}"),
            from(ty.clone(), ty.clone(), ld("a")),
            vec![halves.clone()],
        ),
        Case::new(
            format!("{t} load cast to f32"),
            from(ty.clone(), DataType::F32, to_f32(ld("a"))),
            vec![halves.clone()],
        ),
        Case::new(
            format!("{t} load cast to {t} again"),
            from(ty.clone(), ty.clone(), to_half(ld("a"))),
            vec![halves],
        ),
        Case::new(
            format!("f32 cast to {t} and stored into {t}"),
            from(DataType::F32, ty.clone(), to_half(ld("a"))),
            vec![floats.clone()],
        ),
        Case::new(
            format!("f32 cast to {t} and back to f32"),
            from(DataType::F32, DataType::F32, to_f32(to_half(ld("a")))),
            vec![floats],
        ),
    ]
}

/// Arithmetic, comparisons and variables on loaded halves: f32 throughout, rounded only
/// at a store or a cast.
fn arithmetic_cases(ty: &DataType) -> Vec<Case> {
    let t = name(ty);
    let inputs = three_inputs(ty);
    let over = |out: DataType, body: Vec<Node>| over_abc(ty, out, body);
    let store = |value: Expr| vec![Node::store("out", gid(), value)];
    let product = || bin(BinOp::Mul, ld("a"), ld("b"));
    let mut cases = vec![
        Case::new(
            format!("{t} a*b + c rounded once, at the store"),
            over(ty.clone(), store(bin(BinOp::Add, product(), ld("c")))),
            inputs.clone(),
        ),
        Case::new(
            format!("{t} a*b - c/b kept in f32"),
            over(
                DataType::F32,
                store(cast(
                    DataType::F32,
                    bin(BinOp::Sub, product(), bin(BinOp::Div, ld("c"), ld("b"))),
                )),
            ),
            inputs.clone(),
        ),
        Case::new(
            format!("{t} let keeps the unrounded product"),
            over(
                DataType::F32,
                vec![
                    Node::let_bind("p", product()),
                    Node::store("out", gid(), cast(DataType::F32, Expr::var("p"))),
                ],
            ),
            inputs.clone(),
        ),
        Case::new(
            format!("{t} identity cast rounds the product"),
            over(
                DataType::F32,
                store(cast(DataType::F32, cast(ty.clone(), product()))),
            ),
            inputs.clone(),
        ),
        Case::new(
            format!("{t} min, max and subtraction"),
            over(
                ty.clone(),
                store(bin(
                    BinOp::Sub,
                    bin(BinOp::Min, ld("a"), ld("b")),
                    bin(BinOp::Max, ld("c"), ld("a")),
                )),
            ),
            inputs.clone(),
        ),
    ];
    for op in [BinOp::Lt, BinOp::Eq, BinOp::Ne, BinOp::Ge] {
        cases.push(Case::new(
            format!("{t} {op:?}"),
            over(DataType::U32, store(bin(op, ld("a"), ld("c")))),
            inputs.clone(),
        ));
    }
    cases.push(accumulation_case(ty));
    cases
}

/// Inputs `a`, `b`, `c` of one format: every class of pattern, then random ones.
fn three_inputs(ty: &DataType) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(17);
    let halves = half_bits(ty, &mut rng);
    let random: Vec<u8> = (0..N)
        .flat_map(|_| (rng.next_u32() as u16).to_le_bytes())
        .collect();
    let reversed: Vec<u8> = random.iter().rev().copied().collect();
    vec![halves, random, reversed]
}

/// `body` over half inputs `a`, `b`, `c` and an output `out` of `out` elements.
fn over_abc(ty: &DataType, out: DataType, body: Vec<Node>) -> Program {
    program(
        vec![
            input("a", 0, ty.clone(), N),
            input("b", 1, ty.clone(), N),
            input("c", 2, ty.clone(), N),
            output("out", 3, out),
        ],
        body,
    )
}

/// A half variable summing four loads: the sum is never rounded until the cast to f32
/// reads it out (which does not round).
fn accumulation_case(ty: &DataType) -> Case {
    let mut rng = Rng::new(21);
    let element = bin(
        BinOp::Add,
        bin(BinOp::Mul, gid(), Expr::u32(4)),
        Expr::var("k"),
    );
    Case::new(
        format!("{} accumulated in a variable, unrounded", name(ty)),
        program(
            vec![
                input("a", 0, ty.clone(), N * 4),
                output("out", 1, DataType::F32),
            ],
            vec![
                Node::let_bind("acc", cast(ty.clone(), Expr::f32(0.1))),
                Node::loop_for(
                    "k",
                    Expr::u32(0),
                    Expr::u32(4),
                    vec![Node::assign(
                        "acc",
                        bin(BinOp::Add, Expr::var("acc"), Expr::load("a", element)),
                    )],
                ),
                Node::store("out", gid(), cast(DataType::F32, Expr::var("acc"))),
            ],
        ),
        vec![(0..N * 4)
            .flat_map(|_| (rng.next_u32() as u16 & 0x7BFF).to_le_bytes())
            .collect()],
    )
}

/// `a` holds `N / 2` elements: the upper invocations load past its end, which the
/// reference reads as the bytes [0, 0].
fn out_of_bounds_cases(ty: &DataType) -> Vec<Case> {
    let t = name(ty);
    let halves: Vec<u8> = half_bits(ty, &mut Rng::new(19))[..N as usize].to_vec();
    let short = |out: DataType, body: Vec<Node>| {
        program(
            vec![input("a", 0, ty.clone(), N / 2), output("out", 1, out)],
            body,
        )
    };
    let store = |value: Expr| vec![Node::store("out", gid(), value)];
    let assigned = |use_it: Expr| {
        vec![
            Node::let_bind("v", cast(ty.clone(), Expr::f32(7.0))),
            Node::assign("v", ld("a")),
            Node::store("out", gid(), use_it),
        ]
    };
    let even = bin(
        BinOp::Eq,
        bin(BinOp::BitAnd, gid(), Expr::u32(1)),
        Expr::u32(0),
    );
    let pass = |name: String, program: Program| Case::new(name, program, vec![halves.clone()]);
    vec![
        pass(
            format!("out-of-bounds {t} load stores zero"),
            short(ty.clone(), store(ld("a"))),
        ),
        pass(
            format!("out-of-bounds {t} load cast to f32 reads 0.0"),
            short(
                DataType::F32,
                store(bin(
                    BinOp::Add,
                    cast(DataType::F32, ld("a")),
                    Expr::f32(1.0),
                )),
            ),
        ),
        pass(
            format!("out-of-bounds {t} load selected and stored"),
            short(
                ty.clone(),
                store(Expr::select(
                    even,
                    ld("a"),
                    cast(ty.clone(), Expr::f32(2.5)),
                )),
            ),
        ),
        pass(
            format!("out-of-bounds {t} load assigned to a variable and stored"),
            short(ty.clone(), assigned(Expr::var("v"))),
        ),
        pass(
            format!("out-of-bounds {t} load in arithmetic fails"),
            short(ty.clone(), store(bin(BinOp::Add, ld("a"), ld("a")))),
        )
        .failing(),
        pass(
            format!("out-of-bounds {t} load compared fails"),
            short(DataType::U32, store(bin(BinOp::Lt, ld("a"), ld("a")))),
        )
        .failing(),
        pass(
            format!("out-of-bounds {t} load cast to {t} fails"),
            short(ty.clone(), store(cast(ty.clone(), ld("a")))),
        )
        .failing(),
        pass(
            format!("out-of-bounds {t} load in a variable, then multiplied, fails"),
            short(
                ty.clone(),
                assigned(bin(BinOp::Mul, Expr::var("v"), Expr::var("v"))),
            ),
        )
        .failing(),
    ]
}

/// f16 with f32 and with bf16 (the validator lets these through), and f16 in workgroup
/// memory.
fn mixed_cases() -> Vec<Case> {
    let mut rng = Rng::new(20);
    let f16 = half_bits(&DataType::F16, &mut rng);
    let bf16 = half_bits(&DataType::BF16, &mut rng);
    let floats = moderate_f32(&mut rng);
    let pair = |b: DataType, out: DataType, value: Expr| {
        program(
            vec![
                input("a", 0, DataType::F16, N),
                input("b", 1, b, N),
                output("out", 2, out),
            ],
            vec![Node::store("out", gid(), value)],
        )
    };
    let sum = || bin(BinOp::Add, ld("a"), ld("b"));
    let lid = Expr::LocalId { axis: 0 };
    vec![
        Case::new(
            "f16 + f32 computes in f32",
            pair(DataType::F32, DataType::F32, cast(DataType::F32, sum())),
            vec![f16.clone(), floats.clone()],
        ),
        Case::new(
            "f16 + f32 stored into u32 as the f64's low bytes",
            pair(DataType::F32, DataType::U32, sum()),
            vec![f16.clone(), floats.clone()],
        ),
        Case::new(
            "f16 * bf16 computes in f32, rounded to bf16",
            pair(
                DataType::BF16,
                DataType::BF16,
                cast(
                    DataType::BF16,
                    cast(DataType::F32, bin(BinOp::Mul, ld("a"), ld("b"))),
                ),
            ),
            vec![f16, bf16],
        ),
        Case::new(
            "f16 through workgroup memory",
            // No bounds branch: every invocation reaches the barrier (N is 2 workgroups).
            Program::wrapped(
                vec![
                    input("a", 0, DataType::F32, N),
                    output("out", 1, DataType::F32),
                    BufferDecl::workgroup("tile", 64, DataType::F16),
                ],
                [64, 1, 1],
                vec![
                    Node::store(
                        "tile",
                        lid.clone(),
                        cast(DataType::F16, bin(BinOp::Mul, ld("a"), Expr::f32(3.0))),
                    ),
                    Node::barrier_with_ordering(MemoryOrdering::SeqCst),
                    Node::store(
                        "out",
                        gid(),
                        cast(
                            DataType::F32,
                            Expr::load("tile", bin(BinOp::BitXor, lid, Expr::u32(1))),
                        ),
                    ),
                ],
            ),
            vec![floats],
        ),
    ]
}

/// Half variables in subgroup collectives: f32 lanes. `b` holds `N / 2` elements, so the
/// upper workgroup shuffles out-of-bounds loads, which fails the collective.
fn subgroup_cases() -> Vec<Case> {
    let mut rng = Rng::new(22);
    let f16 = half_bits(&DataType::F16, &mut rng);
    let lanes = u32_bytes(&(0..N).map(|i| (i * 7) % 40).collect::<Vec<_>>());
    let collective = |b_count: u32, value: Expr| {
        Program::wrapped(
            vec![
                input("a", 0, DataType::F16, N),
                input("b", 1, DataType::F16, b_count),
                input("lane", 2, DataType::U32, N),
                output("out", 3, DataType::F16),
            ],
            [64, 1, 1],
            vec![
                Node::let_bind("v", cast(DataType::F16, Expr::f32(0.25))),
                Node::assign("v", bin(BinOp::Add, Expr::var("v"), ld("a"))),
                Node::store("out", gid(), value),
            ],
        )
    };
    let reduce = |v: Expr| Expr::SubgroupReduce {
        op: SubgroupReduceOp::Add,
        value: Box::new(v),
    };
    let shuffle = |v: Expr| Expr::SubgroupShuffle {
        value: Box::new(v),
        lane: Box::new(ld("lane")),
    };
    let inputs = vec![f16.clone(), f16.iter().rev().copied().collect(), lanes];
    let mut short = inputs.clone();
    short[1].truncate(N as usize);
    vec![
        Case::new(
            "f16 variable reduced and shuffled across a subgroup",
            collective(
                N,
                bin(
                    BinOp::Add,
                    reduce(Expr::var("v")),
                    shuffle(bin(BinOp::Mul, Expr::var("v"), ld("b"))),
                ),
            ),
            inputs.clone(),
        ),
        Case::new(
            "out-of-bounds f16 load shuffled across a subgroup fails",
            collective(N / 2, shuffle(ld("b"))),
            short,
        )
        .failing(),
    ]
}
