//! The vyre Programs every engine runs, the test data, and the vyre-reference oracle.

use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program, UnOp};
use vyre_reference::value::Value;

/// The saxpy scale (exact in f32, non-trivial mantissa).
pub const ALPHA: f32 = 2.5;
/// The vadd literal of the warm rows (cold-compile rows vary it).
pub const SALT: u32 = 3;

fn gid() -> Expr {
    Expr::InvocationId { axis: 0 }
}

fn bin(op: BinOp, left: Expr, right: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(left),
        right: Box::new(right),
    }
}

fn guarded(n: u32, body: Vec<Node>) -> Vec<Node> {
    vec![Node::if_then(bin(BinOp::Lt, gid(), Expr::u32(n)), body)]
}

/// `out[i] = a[i] + (b[i] + salt)`, wrapping u32, over `n` elements.
pub fn vadd(n: u32, salt: u32) -> Program {
    let i = gid();
    let sum = bin(
        BinOp::Add,
        Expr::load("a", i.clone()),
        bin(BinOp::Add, Expr::load("b", i.clone()), Expr::u32(salt)),
    );
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read("b", 1, DataType::U32).with_count(n),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [256, 1, 1],
        guarded(n, vec![Node::store("out", i, sum)]),
    )
}

/// `out[i] = ALPHA * x[i] + y[i]` in f32 (a `Mul` then an `Add`: two roundings).
pub fn saxpy(n: u32) -> Program {
    let i = gid();
    let value = bin(
        BinOp::Add,
        bin(BinOp::Mul, Expr::f32(ALPHA), Expr::load("x", i.clone())),
        Expr::load("y", i.clone()),
    );
    Program::wrapped(
        vec![
            BufferDecl::read("x", 0, DataType::F32).with_count(n),
            BufferDecl::read("y", 1, DataType::F32).with_count(n),
            BufferDecl::output("out", 2, DataType::F32).with_count(n),
        ],
        [256, 1, 1],
        guarded(n, vec![Node::store("out", i, value)]),
    )
}

/// saxpy as users write it: `y[i] = alpha[0] * x[i] + y[i]` in f32 (a `Mul` then an
/// `Add`), the scale in a one-element buffer and `y` updated in place (its one output).
pub fn saxpy_user(n: u32) -> Program {
    let i = gid();
    let value = bin(
        BinOp::Add,
        bin(
            BinOp::Mul,
            Expr::load("alpha", Expr::u32(0)),
            Expr::load("x", i.clone()),
        ),
        Expr::load("y", i.clone()),
    );
    Program::wrapped(
        vec![
            BufferDecl::read("alpha", 0, DataType::F32).with_count(1),
            BufferDecl::read("x", 1, DataType::F32).with_count(n),
            BufferDecl::read_write("y", 2, DataType::F32).with_count(n),
        ],
        [256, 1, 1],
        guarded(n, vec![Node::store("y", i, value)]),
    )
}

/// The parameters of [`params_user`]: scale, bias, lower and upper clamp bound.
pub const PARAMS: [f32; 4] = [ALPHA, 0.25, -2.0, 2.0];

/// An elementwise program with its parameters in a buffer, as users write one:
/// `y[i] = min(max(p[0] * x[i] + p[1] * y[i], p[2]), p[3])` in f32 (`p` holds [`PARAMS`],
/// `y` is updated in place): the same bytes per element as vadd.
pub fn params_user(n: u32) -> Program {
    let i = gid();
    let p = |k: u32| Expr::load("p", Expr::u32(k));
    let mixed = bin(
        BinOp::Add,
        bin(BinOp::Mul, p(0), Expr::load("x", i.clone())),
        bin(BinOp::Mul, p(1), Expr::load("y", i.clone())),
    );
    let clamped = bin(BinOp::Min, bin(BinOp::Max, mixed, p(2)), p(3));
    Program::wrapped(
        vec![
            BufferDecl::read("p", 0, DataType::F32).with_count(4),
            BufferDecl::read("x", 1, DataType::F32).with_count(n),
            BufferDecl::read_write("y", 2, DataType::F32).with_count(n),
        ],
        [256, 1, 1],
        guarded(n, vec![Node::store("y", i, clamped)]),
    )
}

/// `out[0] = sum(a)` through `Expr::Atomic` Add, one atomic per element.
pub fn reduce_atomic(n: u32) -> Program {
    let i = gid();
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::output("out", 1, DataType::U32).with_count(1),
        ],
        [256, 1, 1],
        guarded(
            n,
            vec![Node::let_bind(
                "old",
                Expr::atomic_add("out", Expr::u32(0), Expr::load("a", i)),
            )],
        ),
    )
}

/// `x[i] = x[i] + 1` in place: the resident sequence's small step.
pub fn step(n: u32) -> Program {
    let i = gid();
    Program::wrapped(
        vec![BufferDecl::read_write("x", 0, DataType::U32).with_count(n)],
        [256, 1, 1],
        guarded(
            n,
            vec![Node::store(
                "x",
                i.clone(),
                bin(BinOp::Add, Expr::load("x", i), Expr::u32(1)),
            )],
        ),
    )
}

/// `out[i] = a[i] * s[0] + b[i]` in f32 (a `Mul` then an `Add`: two roundings), the scale
/// read from a one-element buffer: the artifact rows' one-kernel program.
pub fn axpb(n: u32) -> Program {
    let i = gid();
    let value = bin(
        BinOp::Add,
        bin(
            BinOp::Mul,
            Expr::load("a", i.clone()),
            Expr::load("s", Expr::u32(0)),
        ),
        Expr::load("b", i.clone()),
    );
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::F32).with_count(n),
            BufferDecl::read("b", 1, DataType::F32).with_count(n),
            BufferDecl::read("s", 2, DataType::F32).with_count(1),
            BufferDecl::output("out", 3, DataType::F32).with_count(n),
        ],
        [256, 1, 1],
        guarded(n, vec![Node::store("out", i, value)]),
    )
}

/// The workgroup sizes of the chain's kernels, in turn: neighbours differ, and vyre's
/// fusion joins only producer/consumer pairs of one workgroup shape, so every kernel of a
/// chain stays a fusion group (a module) of its own.
pub const CHAIN_WORKGROUPS: [u32; 4] = [256, 128, 64, 32];

/// The literal of chain kernel `k` under `salt` (a fresh salt makes every kernel new to
/// every cache).
pub fn chain_literal(k: usize, salt: u32) -> u32 {
    let mut x = (k as u32)
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(salt)
        .wrapping_add(0x1234_5677);
    x ^= x >> 16;
    x = x.wrapping_mul(0x85EB_CA6B);
    x ^= x >> 13;
    x = x.wrapping_mul(0xC2B2_AE35);
    x ^ (x >> 16)
}

/// Kernel `k` of an elementwise u32 chain over `n` elements: reads buffer `v{k}`, writes
/// `v{k+1}` (graph value names are the buffer names, as `ProgramGraph::from_program`
/// makes them), workgroup `CHAIN_WORKGROUPS[k % 4]`. Four shapes in turn, wrapping u32:
/// `x * c + d`, `x ^ (x >> s)`, a rotate written with shifts, `(x + c) ^ d`; the literals
/// come from [`chain_literal`].
pub fn chain_kernel(k: usize, n: u32, salt: u32) -> Program {
    let i = gid();
    let (input, output) = (format!("v{k}"), format!("v{}", k + 1));
    let x = || Expr::load(input.as_str(), i.clone());
    let lit = chain_literal(k, salt);
    let shift = 1 + lit % 31;
    let value = match k % 4 {
        0 => bin(
            BinOp::Add,
            bin(BinOp::Mul, x(), Expr::u32(lit | 1)),
            Expr::u32(lit >> 3),
        ),
        1 => bin(BinOp::BitXor, x(), bin(BinOp::Shr, x(), Expr::u32(shift))),
        2 => bin(
            BinOp::BitOr,
            bin(BinOp::Shl, x(), Expr::u32(shift)),
            bin(BinOp::Shr, x(), Expr::u32(32 - shift)),
        ),
        _ => bin(
            BinOp::BitXor,
            bin(BinOp::Add, x(), Expr::u32(lit)),
            Expr::u32(lit.rotate_left(13)),
        ),
    };
    Program::wrapped(
        vec![
            BufferDecl::read(&input, 0, DataType::U32).with_count(n),
            BufferDecl::output(&output, 1, DataType::U32).with_count(n),
        ],
        [CHAIN_WORKGROUPS[k % 4], 1, 1],
        guarded(n, vec![Node::store(output.as_str(), i, value)]),
    )
}

/// vyre-reference running the kernels of a chain in order on `x`: the last one's output.
pub fn chain_reference(kernels: &[Program], x: &[u8]) -> Result<Vec<u8>, String> {
    let mut value = x.to_vec();
    for (k, program) in kernels.iter().enumerate() {
        let mut out = reference(program, &[value.as_slice()])?;
        if out.len() != 1 {
            return Err(format!(
                "chain kernel {k}: the reference returned {} outputs",
                out.len()
            ));
        }
        value = out.remove(0);
    }
    Ok(value)
}

/// Whether `program` uses an op that vyre-driver-cuda 0.7.2 lowers only to approximate PTX
/// (`Exp`, `Log`, `Exp2`, `Log2`, `Sin`, `Cos`, `Tanh`): the programs it rejects unless
/// `DispatchConfig::ulp_budget` is positive ("ulp_budget is not positive").
pub fn needs_ulp_budget(program: &Program) -> bool {
    let mut found = false;
    vyre_foundation::transform::visit::walk_exprs(program, |expr| {
        if let Expr::UnOp { op, .. } = expr {
            found |= matches!(
                op,
                UnOp::Exp
                    | UnOp::Log
                    | UnOp::Exp2
                    | UnOp::Log2
                    | UnOp::Sin
                    | UnOp::Cos
                    | UnOp::Tanh
            );
        }
    });
    found
}

/// Deterministic xorshift data, never all zeros.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// `count` random u32 words (little-endian bytes).
    pub fn u32_bytes(&mut self, count: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(count * 4);
        for _ in 0..count {
            out.extend_from_slice(&self.next_u32().to_le_bytes());
        }
        out
    }

    /// `count` finite normal f32 values in +-[1, 1024) (no subnormals, NaN or zero).
    pub fn f32_bytes(&mut self, count: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(count * 4);
        for _ in 0..count {
            let r = self.next_u32();
            let mantissa = r & 0x007F_FFFF;
            let exponent = 127 + (r >> 23) % 10; // 2^0 .. 2^9
            let sign = r & 0x8000_0000;
            let bits = sign | (exponent << 23) | mantissa;
            out.extend_from_slice(&bits.to_le_bytes());
        }
        out
    }
}

/// vyre-reference's outputs, or its error text.
pub fn reference(program: &Program, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>, String> {
    let values: Vec<Value> = inputs.iter().map(|b| Value::from(b.to_vec())).collect();
    vyre_reference::reference_eval(program, &values)
        .map(|outs| outs.iter().map(Value::to_bytes).collect())
        .map_err(|e| e.to_string())
}

/// The element indices a sampled check covers for an `n`-element elementwise output: the
/// first and last `edge` elements and `random` others, sorted and deduplicated.
pub fn sample_indices(n: usize, edge: usize, random: usize, seed: u64) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..edge.min(n)).collect();
    idx.extend(n.saturating_sub(edge)..n);
    let mut rng = Rng::new(seed);
    for _ in 0..random {
        idx.push((rng.next_u64() % n as u64) as usize);
    }
    idx.sort_unstable();
    idx.dedup();
    idx
}

/// Gather 4-byte elements `idx` of `bytes`.
pub fn gather(bytes: &[u8], idx: &[usize]) -> Vec<u8> {
    let mut out = Vec::with_capacity(idx.len() * 4);
    for &i in idx {
        out.extend_from_slice(&bytes[i * 4..i * 4 + 4]);
    }
    out
}
