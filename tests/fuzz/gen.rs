//! The seeded generator of random, well-typed, terminating, race-free Programs.
//!
//! Every program it returns passes vyre's validator (rejected drafts are regenerated and
//! counted) and runs on `vyre-reference` in bounded time. Determinism across lanes is by
//! construction:
//!
//! * each invocation computes `lin`, its linear global index over the exact grid the
//!   reference (and the backend) launch, and stores only into its own slots
//!   `lin * k + c` (`c < k`) of the read-write and output buffers, or out of bounds;
//!   it reads those buffers only at its own slots;
//! * read-only inputs are read anywhere, in or out of bounds;
//! * workgroup memory is written only at the invocation's own slot (`lid`), then a
//!   barrier, then read anywhere, then a barrier, and only in workgroup-uniform control
//!   flow (top level, uniform `If`s and constant-bound loops);
//! * shared counters are touched only by atomics of one commutative operator per buffer
//!   whose results are discarded; atomics on the invocation's own slots may use any
//!   operator and their results.
//!
//! Loops have small constant or clamped data-dependent trip counts, and the product of
//! trip counts along any nesting is bounded, so every program terminates quickly.
//!
//! What is generated is driven by [`Features`], a table of enabled operators, element
//! types, statements and workgroup shapes: to cover a construct the emitter learns to
//! lower, add it to the table in [`Features::lowered`].

use super::case::FuzzCase;
use super::rng::Rng;
use super::values;
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{
    AtomicOp, BinOp, BufferAccess, BufferDecl, DataType, Expr, MemoryOrdering, Node, Program,
    SubgroupReduceOp, UnOp,
};

/// The value types expressions are generated at. (The reference's run-time value and
/// vyre's static type agree for every expression the generator builds at these types.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    U32,
    I32,
    F32,
    Bool,
}

/// Statement kinds, weighted in [`Features::statements`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stmt {
    Let,
    Assign,
    Store,
    If,
    UniformIf,
    Loop,
    Block,
    Region,
    EarlyReturn,
    CounterAtomic,
    SharedPhase,
    Barrier,
    /// A store whose value is a run-time-sized bytes load (see `Role::BytesSource`).
    BytesStore,
    // The constructs below are issue 17's: what vyre-reference runs and the emitter did
    // not lower (emitter v13 lowers the async and most bytes forms; README "Not yet
    // lowered" lists what it still refuses). Only `GenConfig::complete` enables them.
    /// `let s = <subgroup op>` wherever the statement lands (any branch, loop, after a
    /// `Return`).
    SubgroupLet,
    /// `if <data-dependent> { ...; let s = <subgroup op> }`.
    SubgroupBranch,
    /// `if <data-dependent> { loop { ...; let s = <subgroup op> } }`.
    SubgroupDivergentLoop,
    /// `if <data-dependent> { return }; ...; let s = <subgroup op>`.
    SubgroupAfterReturn,
    /// `let x = ..; if <data-dependent> { x = .. }; let s = <subgroup op over x>`.
    SubgroupChanged,
    /// `x` bound with two types where lanes of one subgroup hold it differently:
    /// `if <data-dependent> { let x: A = ..; <op over x> } else { let x: B = ..; <op> }`,
    /// or `if <data-dependent> { let x: A = ..; return }; let x: B = ..; <op over x>`
    /// (the reference evaluates each lane's operand with that lane's own binding).
    SubgroupTwoTyped,
    /// A bytes load used as an index, a select condition, an operand (a run-time error
    /// in the reference), an assigned value, or a `Let` of a load from a writable bytes
    /// buffer (see [`Gen::bytes_use`] for the uses vyre's validator rejects).
    BytesUse,
    /// `shb[lid * 4] = u32; barrier; own[..] = shb[any]; barrier` on a workgroup bytes
    /// buffer (uniform control flow only).
    SharedBytesPhase,
    /// An async copy whose start and wait are in different blocks.
    AsyncSplit,
    /// `c = 0; if <data-dependent> { c = 1 }; if c == 1 { barrier; .. } else { .. }`: a
    /// barrier in a branch vyre's validator takes for uniform (a literal assigned in a
    /// data-dependent branch keeps `c` uniform to it) but whose lanes may disagree at run
    /// time (the reference then fails). Uniform control flow only.
    DivergentBarrier,
    /// `rmirror[t] = rsrc[t]` (or, in every such statement of a program, a select of
    /// `rsrc[t]` and `rsrc[t + 1]` on `t`'s parity; through a `Let` or not) on buffers of a raw element type (8-bit float, 4-bit,
    /// quantized, handle, zero-stride array): values vyre's
    /// validator lets only move between buffers of their type. Rarely a comparison of two
    /// such loads, a run-time error in the reference wherever it runs.
    RawCopy,
    /// `loop c { let idx = c * s + <u32>; if idx < <bound> { Let/Assign/Store over loads
    /// at idx } }`: the strided, guarded loop of vyre-libs' reductions and write-backs,
    /// whose branch emitter v37 evaluates straight-line (`lower::speculate`), its faults,
    /// stores and assignments guarded, its loads past the end reading zeros.
    GuardedLoop,
}

/// The table of enabled constructs.
#[derive(Debug, Clone)]
pub struct Features {
    /// u32 x u32 -> u32 operators.
    pub u32_binops: Vec<BinOp>,
    /// i32 x i32 -> i32 operators that vyre's validator types as i32.
    pub i32_binops: Vec<BinOp>,
    /// i32 x i32 -> i32 operators that the validator types as u32 (the reference keeps
    /// i32): generated as `Cast(I32, op(a, b))`.
    pub i32_recast_binops: Vec<BinOp>,
    pub f32_binops: Vec<BinOp>,
    pub compare_ops: Vec<BinOp>,
    pub u32_unops: Vec<UnOp>,
    pub i32_unops: Vec<UnOp>,
    pub f32_unops: Vec<UnOp>,
    /// f32 -> bool tests.
    pub f32_tests: Vec<UnOp>,
    /// The transcendentals lowered to calls of the bit-exact libm `.func`s.
    pub libm_unops: Vec<UnOp>,
    /// Atomics on an invocation's own slot (any operator; the old value is used).
    pub own_atomics: Vec<AtomicOp>,
    /// Atomics on shared counters (commutative operators only; results discarded).
    pub counter_atomics: Vec<AtomicOp>,
    /// Element types of read-only inputs.
    pub input_elements: Vec<DataType>,
    /// Element types of read-write and output buffers.
    pub output_elements: Vec<DataType>,
    /// Element types of workgroup buffers.
    pub shared_elements: Vec<DataType>,
    pub workgroups: Vec<[u32; 3]>,
    pub statements: Vec<(Stmt, u32)>,
    /// `U8/U16/I8/I16` casts.
    pub narrow_casts: bool,
    /// `U64/I64` casts and u64 unary ops/comparisons.
    pub wide_casts: bool,
    /// i32 / f32 / bool typed load indices (negative ones are run-time errors).
    pub odd_indices: bool,
    /// Percentage of i32 `Div`/`Mod` whose divisor is not guarded against 0 (run-time
    /// errors in the reference and fault words on the GPU).
    pub unguarded_division: u32,
    /// Bytes buffers: a read-only source whose loads (the rest of the buffer) are stored
    /// into a bytes mirror or into own u32 slots.
    pub bytes_buffers: bool,
    /// Percentage of branch conditions, dividends and divisors built from literals alone,
    /// which the compiler folds to constants (statically dead branches, constant
    /// divisions).
    pub constant_operands: u32,
    /// Casts through 2..=5 intermediate integer types (`u8(u32(u8(u64(x))))`).
    pub cast_chains: bool,
    /// Percentage of programs with a read-only bytes source (and maybe a bytes mirror).
    pub bytes_chance: u32,
    /// Declare the buffers only the not-yet-lowered statements use: a writable bytes
    /// buffer, a workgroup bytes buffer, and the source and destination of async copies.
    pub unlowered_buffers: bool,
    /// Element types of the `Stmt::RawCopy` buffers (none: no such buffers).
    pub raw_elements: Vec<DataType>,
    /// Percentage of programs with a pair of such buffers.
    pub raw_chance: u32,
}

impl Features {
    /// Everything the emitter lowers today (README "What is lowered").
    pub fn lowered() -> Self {
        use BinOp as B;
        use UnOp as U;
        Self {
            u32_binops: vec![
                B::Add,
                B::Sub,
                B::Mul,
                B::Div,
                B::Mod,
                B::WrappingAdd,
                B::WrappingSub,
                B::BitAnd,
                B::BitOr,
                B::BitXor,
                B::Shl,
                B::Shr,
                B::RotateLeft,
                B::RotateRight,
                B::AbsDiff,
                B::Min,
                B::Max,
                B::SaturatingAdd,
                B::SaturatingSub,
                B::SaturatingMul,
                B::MulHigh,
            ],
            i32_binops: vec![B::Add, B::Sub, B::Mul, B::Div, B::Min, B::Max],
            i32_recast_binops: vec![
                B::Mod,
                B::BitAnd,
                B::BitOr,
                B::BitXor,
                B::WrappingAdd,
                B::WrappingSub,
            ],
            f32_binops: vec![B::Add, B::Sub, B::Mul, B::Div, B::Min, B::Max],
            compare_ops: vec![B::Eq, B::Ne, B::Lt, B::Gt, B::Le, B::Ge],
            u32_unops: vec![
                U::Negate,
                U::BitNot,
                U::Popcount,
                U::Clz,
                U::Ctz,
                U::ReverseBits,
                U::Unpack4Low,
                U::Unpack4High,
                U::Unpack8Low,
                U::Unpack8High,
            ],
            i32_unops: vec![U::BitNot, U::Popcount, U::Clz, U::Ctz, U::ReverseBits],
            f32_unops: vec![
                U::Negate,
                U::Abs,
                U::Sqrt,
                U::InverseSqrt,
                U::Reciprocal,
                U::Floor,
                U::Ceil,
                U::Round,
                U::Trunc,
                U::Sign,
            ],
            f32_tests: vec![U::IsNan, U::IsInf, U::IsFinite],
            libm_unops: vec![
                U::Sin,
                U::Cos,
                U::Tan,
                U::Asin,
                U::Acos,
                U::Atan,
                U::Sinh,
                U::Cosh,
                U::Tanh,
                U::Exp,
                U::Exp2,
                U::Log,
                U::Log2,
            ],
            own_atomics: vec![
                AtomicOp::Add,
                AtomicOp::Or,
                AtomicOp::And,
                AtomicOp::Xor,
                AtomicOp::Min,
                AtomicOp::Max,
                AtomicOp::Exchange,
                AtomicOp::CompareExchange,
                AtomicOp::LruUpdate,
            ],
            counter_atomics: vec![
                AtomicOp::Add,
                AtomicOp::Or,
                AtomicOp::And,
                AtomicOp::Xor,
                AtomicOp::Min,
                AtomicOp::Max,
                AtomicOp::LruUpdate,
            ],
            input_elements: vec![
                DataType::U32,
                DataType::U32,
                DataType::I32,
                DataType::F32,
                DataType::F32,
                DataType::Bool,
                DataType::U8,
                DataType::I8,
                DataType::U16,
                DataType::I16,
                DataType::U64,
                DataType::I64,
            ],
            output_elements: vec![
                DataType::U32,
                DataType::U32,
                DataType::I32,
                DataType::F32,
                DataType::F32,
                DataType::Bool,
                DataType::U8,
                DataType::I8,
                DataType::U16,
                DataType::I16,
                DataType::U64,
            ],
            shared_elements: vec![DataType::U32, DataType::I32, DataType::F32],
            workgroups: vec![
                [1, 1, 1],
                [2, 1, 1],
                [3, 1, 1],
                [4, 1, 1],
                [7, 1, 1],
                [8, 1, 1],
                [16, 1, 1],
                [31, 1, 1],
                [32, 1, 1],
                [33, 1, 1],
                [64, 1, 1],
                [128, 1, 1],
                [1, 4, 1],
                [2, 2, 1],
                [4, 2, 1],
                [3, 5, 1],
                [8, 4, 1],
                [16, 2, 1],
                [1, 1, 3],
                [2, 1, 2],
                [2, 2, 2],
                [4, 2, 2],
                [3, 2, 4],
            ],
            statements: vec![
                (Stmt::Let, 26),
                (Stmt::Assign, 10),
                (Stmt::Store, 24),
                (Stmt::If, 9),
                (Stmt::UniformIf, 2),
                (Stmt::Loop, 7),
                (Stmt::Block, 3),
                (Stmt::Region, 3),
                (Stmt::EarlyReturn, 3),
                (Stmt::CounterAtomic, 5),
                (Stmt::SharedPhase, 6),
                (Stmt::Barrier, 1),
                (Stmt::BytesStore, 8),
            ],
            narrow_casts: true,
            wide_casts: true,
            odd_indices: true,
            unguarded_division: 5,
            bytes_buffers: true,
            constant_operands: 5,
            cast_chains: true,
            bytes_chance: 20,
            unlowered_buffers: false,
            raw_elements: Vec::new(),
            raw_chance: 0,
        }
    }

    /// Only u32/i32/f32/bool buffers and no narrow or 64-bit casts.
    pub fn core() -> Self {
        let wide = [
            DataType::U32,
            DataType::U32,
            DataType::I32,
            DataType::F32,
            DataType::F32,
            DataType::Bool,
        ];
        Self {
            input_elements: wide.to_vec(),
            output_elements: wide.to_vec(),
            narrow_casts: false,
            wide_casts: false,
            bytes_buffers: false,
            ..Self::lowered()
        }
    }
}

/// Size limits of generated programs.
#[derive(Debug, Clone)]
pub struct GenConfig {
    pub features: Features,
    /// Statements per program (at most; nested ones included).
    pub max_statements: u32,
    pub max_expr_depth: u32,
    /// Upper bound on the product of loop trip counts along any nesting.
    pub max_trip_product: u32,
    /// Largest declared element count of a buffer.
    pub max_count: u32,
    /// Every invocation runs the same computation: `lin` is a literal, no id, atomic or
    /// workgroup-memory phase appears, so all invocations read and write the same slots
    /// in place (what the reference runs one invocation after another).
    pub replicated: bool,
    /// Deepest statement nesting (`If`, `Loop`, blocks) that may open another level.
    pub max_nesting: u32,
}

impl Default for GenConfig {
    fn default() -> Self {
        Self {
            features: Features::lowered(),
            max_statements: 28,
            max_expr_depth: 3,
            max_trip_product: 24,
            max_count: 200,
            max_nesting: 4,
            replicated: false,
        }
    }
}

impl GenConfig {
    /// The larger shape of `../shared/regressions/ptxas-crash-1` (a random program whose
    /// PTX crashed ptxas): 48 statements, expression depth 6, loops nested six deep, and
    /// more literal-only conditions and division operands.
    pub fn large() -> Self {
        Self {
            features: Features {
                constant_operands: 20,
                ..Features::lowered()
            },
            max_statements: 48,
            max_expr_depth: 6,
            max_trip_product: 48,
            max_count: 200,
            max_nesting: 6,
            replicated: false,
        }
    }

    /// Issue 17's gate: the large shape plus every construct of issue 17 (what the
    /// reference runs and the emitter did not lower; README "Not yet lowered" lists what
    /// is still refused): subgroup operations in
    /// data-dependent branches, in loops inside them, after an early `Return` and over
    /// values assigned in a branch; bytes loads as indices, select conditions, operands,
    /// assigned values and `Let`s of writable bytes loads; workgroup
    /// bytes buffers; async copies whose start and wait are in different blocks. The
    /// share the emitter still rejects is issue 17's to-do list.
    pub fn complete() -> Self {
        let mut features = Features {
            bytes_chance: 50,
            unlowered_buffers: true,
            raw_elements: raw_element_types(),
            raw_chance: 25,
            ..Self::large().features
        };
        features.statements.extend([
            (Stmt::SubgroupLet, 4),
            (Stmt::SubgroupBranch, 3),
            (Stmt::SubgroupDivergentLoop, 3),
            (Stmt::SubgroupAfterReturn, 2),
            (Stmt::SubgroupChanged, 3),
            (Stmt::SubgroupTwoTyped, 3),
            (Stmt::BytesUse, 8),
            (Stmt::SharedBytesPhase, 3),
            (Stmt::AsyncSplit, 5),
            (Stmt::RawCopy, 5),
            (Stmt::DivergentBarrier, 2),
            (Stmt::GuardedLoop, 4),
        ]);
        Self {
            features,
            ..Self::large()
        }
    }

    /// The default shape with every invocation the same computation
    /// ([`GenConfig::replicated`]): in-place updates of shared slots by the whole grid.
    pub fn replicated() -> Self {
        Self {
            replicated: true,
            ..Self::default()
        }
    }

    /// The shape called `name`: "default", "large", "replicated" or "complete".
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::default()),
            "large" => Some(Self::large()),
            "complete" => Some(Self::complete()),
            "replicated" => Some(Self::replicated()),
            _ => None,
        }
    }
}

/// A generated program plus how many drafts vyre's validator rejected on the way.
pub struct Generated {
    pub case: FuzzCase,
    pub rejected_drafts: u32,
    /// The validator message of the last rejected draft (to spot generator bugs).
    pub last_rejection: Option<String>,
}

/// Generate the program for `seed`: drafts until one passes the validator.
pub fn generate(seed: u64, config: &GenConfig) -> Generated {
    generate_from(Rng::new(seed), seed, config)
}

/// [`generate`] drawing its choices from `rng` (e.g. a fuzzer's script); `seed` is only
/// recorded in the case.
pub fn generate_from(mut rng: Rng, seed: u64, config: &GenConfig) -> Generated {
    let mut rejected_drafts = 0;
    let mut last_rejection = None;
    loop {
        let case = draft(&mut rng, config, seed);
        match super::oracle::validate(&case.program) {
            Ok(()) => {
                return Generated {
                    case,
                    rejected_drafts,
                    last_rejection,
                }
            }
            Err(message) => {
                rejected_drafts += 1;
                last_rejection = Some(message);
                if rejected_drafts > 1000 {
                    panic!("generator produced 1000 invalid drafts for seed {seed:#x}: {last_rejection:?}");
                }
            }
        }
    }
}

// ------------------------------------------------------------------ buffers

#[derive(Debug, Clone, PartialEq)]
enum Role {
    Input,
    /// ReadWrite storage, consumes an input, returned; `k` slots per invocation.
    InOut {
        k: u32,
    },
    /// Backend-allocated output; `k` slots per invocation.
    Output {
        k: u32,
    },
    /// u32 ReadWrite counter hit only by `op` atomics.
    Counter(AtomicOp),
    Shared,
    /// Read-only bytes input, loaded only as the value of a `Stmt::BytesStore`.
    BytesSource,
    /// Bytes output written only by `mirror[t] = source[t]`: every invocation that
    /// writes byte `m` writes `source[m]`, so the overlapping copies never race.
    BytesMirror,
    /// Read-write bytes input (`Stmt::BytesUse`) whose stores copy its bytes onto
    /// themselves: a `Let` of its load read after one is a snapshot, and storing only what
    /// is there keeps the program race-free.
    BytesWritable,
    /// Workgroup bytes buffer: `Stmt::SharedBytesPhase` writes 4 bytes at `lid * 4`.
    SharedBytes,
    /// Read-only u32 input copied by async loads and stores.
    AsyncSource,
    /// u32 read-write buffer written only by async copies from `AsyncSource` (every
    /// invocation copies the same bytes to the same place, so the copies never race).
    /// Read-write rather than an output: vyre's validator allows one output buffer.
    AsyncDest,
    /// Read-only input of a raw element type, read only by `Stmt::RawCopy`.
    RawSource,
    /// Read-write buffer of the same type written only by `Stmt::RawCopy`, always with
    /// a value that depends on the index alone (so overlapping writes never race).
    RawMirror,
    /// Read-only f64 input, loaded only as one side's binding of `Stmt::SubgroupTwoTyped`
    /// (the other side an f32, whose shuffles receive the f64 lanes' values whole).
    WideFloats,
}

#[derive(Debug, Clone)]
struct GBuf {
    name: String,
    element: DataType,
    role: Role,
    /// Declared element count (0 = runtime-sized input).
    count: u32,
    /// Elements actually passed (inputs) or allocated (outputs, shared).
    len: u32,
    uniform: bool,
    /// Own-slot u32 buffer used by atomics. vyre's validator rejects plain reads and
    /// atomics of one buffer in sibling statements (a fusion hazard), so such a buffer
    /// is never loaded non-atomically.
    atomic: bool,
}

impl GBuf {
    fn own_k(&self) -> Option<u32> {
        match self.role {
            Role::InOut { k } | Role::Output { k } => Some(k),
            _ => None,
        }
    }

    fn takes_input(&self) -> bool {
        matches!(
            self.role,
            Role::Input
                | Role::InOut { .. }
                | Role::Counter(_)
                | Role::BytesSource
                | Role::BytesWritable
                | Role::AsyncSource
                | Role::AsyncDest
                | Role::RawSource
                | Role::RawMirror
                | Role::WideFloats
        )
    }

    fn returned(&self) -> bool {
        matches!(
            self.role,
            Role::InOut { .. }
                | Role::Output { .. }
                | Role::Counter(_)
                | Role::BytesMirror
                | Role::BytesWritable
                | Role::AsyncDest
                | Role::RawMirror
        )
    }

    fn is_shared(&self) -> bool {
        matches!(self.role, Role::Shared | Role::SharedBytes)
    }
}

const COUNTS: &[u32] = &[
    1, 1, 2, 3, 4, 5, 7, 8, 8, 12, 16, 16, 24, 31, 32, 33, 40, 48, 64, 64, 96, 100, 128, 200,
];

fn pick_count(rng: &mut Rng, max: u32) -> u32 {
    loop {
        let c = *rng.pick(COUNTS);
        if c <= max {
            return c;
        }
    }
}

// ------------------------------------------------------------------ generator state

#[derive(Debug, Clone)]
struct Var {
    name: String,
    ty: Ty,
    assignable: bool,
}

#[derive(Debug, Clone, Copy)]
struct Ctx {
    /// Every invocation of the workgroup reaches this point together (barriers allowed).
    uniform: bool,
    depth: u32,
    trip: u32,
    top_level: bool,
    /// No `Return` may be generated here: between an async copy's start and its wait
    /// (an invocation that returns with a copy pending is a run-time error).
    no_return: bool,
}

struct Gen<'a> {
    rng: &'a mut Rng,
    cfg: &'a GenConfig,
    bufs: Vec<GBuf>,
    scopes: Vec<Vec<Var>>,
    next_name: u32,
    budget: i32,
    threads: u32,
    /// Elementwise shape: every buffer access is `buf[gid]` (via `lin`), 1-D workgroup,
    /// no atomics, barriers, workgroup memory or other ID axes, so the backend runs the
    /// program through its vector entry and chunked pipeline.
    elementwise: bool,
    /// Leaves are literals only (see [`Gen::constant_expr`]).
    literal_leaves: bool,
    /// Which families of not-yet-lowered statements this program may hold
    /// ([`UNLOWERED_SUBGROUPS`] | [`UNLOWERED_BYTES`] | [`UNLOWERED_ASYNC`]).
    unlowered: u8,
    /// Every `Stmt::RawCopy` of the program writes the parity select (else the plain
    /// load): one function of the index per program, so overlapping writes never race.
    raw_parity: bool,
    /// Set while generating the operand of a subgroup operation nested in another's
    /// operand (one level of nesting, see [`Gen::nested_operand`]).
    in_nested_operand: bool,
}

const UNLOWERED_SUBGROUPS: u8 = 1;
const UNLOWERED_BYTES: u8 = 2;
const UNLOWERED_ASYNC: u8 = 4;

fn lit_u32(v: u32) -> Expr {
    Expr::LitU32(v)
}

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

fn un(op: UnOp, v: Expr) -> Expr {
    Expr::UnOp {
        op,
        operand: Box::new(v),
    }
}

fn cast(target: DataType, v: Expr) -> Expr {
    Expr::Cast {
        target,
        value: Box::new(v),
    }
}

fn select(c: Expr, t: Expr, f: Expr) -> Expr {
    Expr::Select {
        cond: Box::new(c),
        true_val: Box::new(t),
        false_val: Box::new(f),
    }
}

fn var(name: &str) -> Expr {
    Expr::Var(name.into())
}

fn load(buffer: &str, index: Expr) -> Expr {
    Expr::Load {
        buffer: buffer.into(),
        index: Box::new(index),
    }
}

/// Mirrors vyre's V044 check: a literal (possibly cast) zero.
/// Whether `e` is built from literals alone (no loads, variables, ids or atomics).
fn literal_only(e: &Expr) -> bool {
    match e {
        Expr::LitU32(_) | Expr::LitI32(_) | Expr::LitF32(_) | Expr::LitBool(_) => true,
        Expr::BinOp { left, right, .. } => literal_only(left) && literal_only(right),
        Expr::UnOp { operand, .. } => literal_only(operand),
        Expr::Cast { value, .. } => literal_only(value),
        Expr::Select {
            cond,
            true_val,
            false_val,
        } => literal_only(cond) && literal_only(true_val) && literal_only(false_val),
        Expr::Fma { a, b, c } => literal_only(a) && literal_only(b) && literal_only(c),
        _ => false,
    }
}

fn static_zero(e: &Expr) -> bool {
    match e {
        Expr::LitU32(0) | Expr::LitI32(0) => true,
        // The wire format (and the reference) flush subnormal literals to zero.
        Expr::LitF32(v) => *v == 0.0 || v.is_subnormal(),
        Expr::Cast { value, .. } => static_zero(value),
        _ => false,
    }
}

const ORDERINGS: &[MemoryOrdering] = &[
    MemoryOrdering::Relaxed,
    MemoryOrdering::Acquire,
    MemoryOrdering::Release,
    MemoryOrdering::AcqRel,
    MemoryOrdering::SeqCst,
];

const BARRIER_ORDERINGS: &[MemoryOrdering] = &[
    MemoryOrdering::Acquire,
    MemoryOrdering::Release,
    MemoryOrdering::AcqRel,
    MemoryOrdering::SeqCst,
];

impl Gen<'_> {
    fn fresh(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        format!("{prefix}{}", self.next_name)
    }

    fn vars_of(&self, ty: Ty) -> Vec<&Var> {
        self.scopes
            .iter()
            .flatten()
            .filter(|v| v.ty == ty)
            .collect()
    }

    fn declare(&mut self, name: String, ty: Ty, assignable: bool) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.push(Var {
                name,
                ty,
                assignable,
            });
        }
    }

    fn bufs_where(&self, f: impl Fn(&GBuf) -> bool) -> Vec<usize> {
        (0..self.bufs.len()).filter(|&i| f(&self.bufs[i])).collect()
    }

    // ---------------------------------------------------------------- literals

    fn lit(&mut self, ty: Ty) -> Expr {
        match ty {
            Ty::U32 => Expr::LitU32(values::u32_edge(self.rng)),
            Ty::I32 => Expr::LitI32(values::i32_edge(self.rng)),
            Ty::F32 => {
                let v = values::f32_edge(self.rng);
                // vyre's wire format (and so `Program::fingerprint`) folds -0.0 and
                // negative subnormal literals into +0.0; spell them as `-(+x)` so saved
                // regression cases keep their meaning.
                if v.is_sign_negative() && (v == 0.0 || v.is_subnormal()) {
                    un(UnOp::Negate, Expr::LitF32(-v))
                } else {
                    Expr::LitF32(v)
                }
            }
            Ty::Bool => Expr::LitBool(self.rng.chance(50)),
        }
    }

    fn nonzero_lit(&mut self, ty: Ty) -> Expr {
        loop {
            let e = self.lit(ty);
            if !static_zero(&e) {
                return e;
            }
        }
    }

    // ---------------------------------------------------------------- indices

    /// The invocation's own slot `c` of a `k`-slot buffer: `lin * k + c`.
    fn own_slot(&mut self, k: u32) -> Expr {
        let base = if k == 1 {
            var("lin")
        } else {
            bin(BinOp::Mul, var("lin"), lit_u32(k))
        };
        let c = self.rng.below(k);
        if c == 0 {
            base
        } else {
            bin(BinOp::Add, base, lit_u32(c))
        }
    }

    /// An index into buffer `b` that only this invocation uses (or that is out of
    /// bounds for every invocation).
    fn own_index(&mut self, b: usize) -> Expr {
        if self.elementwise {
            return self.elementwise_index();
        }
        let k = self.bufs[b].own_k().unwrap_or(1);
        let len = self.bufs[b].len.max(self.bufs[b].count);
        match self.rng.below(20) {
            0..=13 => self.own_slot(k),
            14..=15 if k > 1 && k.is_power_of_two() => {
                // Data-dependent slot inside the invocation's own k-slot window.
                let base = bin(BinOp::Mul, var("lin"), lit_u32(k));
                let sel = self.expr(Ty::U32, 1);
                bin(BinOp::Add, base, bin(BinOp::BitAnd, sel, lit_u32(k - 1)))
            }
            16..=17 => {
                // Own slot or an index past the end.
                let c = self.cond(1);
                let own = self.own_slot(k);
                let oob = *self
                    .rng
                    .pick(&[len, len + 1, len + 17, 0x8000_0000, u32::MAX]);
                if self.rng.chance(50) {
                    select(c, own, lit_u32(oob))
                } else {
                    select(c, lit_u32(oob), own)
                }
            }
            _ => {
                // Always out of bounds (lin * k + c < 2^31).
                let own = self.own_slot(k);
                bin(BinOp::BitOr, own, lit_u32(0x8000_0000))
            }
        }
    }

    /// Any index into a read-only buffer: in or out of bounds, data-dependent or not.
    fn any_index(&mut self, b: usize, depth: u32) -> Expr {
        if self.elementwise {
            return self.elementwise_index();
        }
        let len = self.bufs[b].len.max(1);
        let cfg: &GenConfig = self.cfg;
        let f = &cfg.features;
        if f.odd_indices && self.rng.chance(1) {
            // i32 / f32 / bool index: negative and fractional ones are run-time errors.
            let ty = *self.rng.pick(&[Ty::I32, Ty::F32, Ty::Bool]);
            return self.expr(ty, depth.min(1));
        }
        match self.rng.below(36) {
            0..=13 => var("lin"),
            14..=16 => bin(BinOp::Add, var("lin"), lit_u32(self.rng.range(1, 5))),
            17..=22 => {
                lit_u32(
                    *self
                        .rng
                        .pick(&[0, len - 1, len, len + 1, len / 2, 0x8000_0000, u32::MAX]),
                )
            }
            23..=27 => {
                let e = self.expr(Ty::U32, depth.min(1));
                if self.rng.chance(50) {
                    bin(BinOp::Mod, e, lit_u32(len))
                } else {
                    e
                }
            }
            28..=30 => {
                let vars: Vec<String> = self
                    .vars_of(Ty::U32)
                    .iter()
                    .map(|v| v.name.clone())
                    .collect();
                match vars.is_empty() {
                    true => var("lin"),
                    false => var(self.rng.pick::<String>(&vars)),
                }
            }
            31..=32 => bin(
                BinOp::Sub,
                lit_u32(len.saturating_sub(1)),
                bin(BinOp::Mod, var("lin"), lit_u32(len)),
            ),
            _ => cast(DataType::U32, self.expr(Ty::I32, depth.min(1))),
        }
    }

    /// The only index an elementwise program uses: the invocation's own `gid`, through
    /// the `lin` alias or directly.
    fn elementwise_index(&mut self) -> Expr {
        if self.rng.chance(70) {
            var("lin")
        } else {
            Expr::InvocationId { axis: 0 }
        }
    }

    // ---------------------------------------------------------------- loads

    /// `Load(b, index)` converted to `ty`, if `b`'s element type can produce `ty`.
    fn load_as(&mut self, ty: Ty, b: usize, index: Expr) -> Option<Expr> {
        let name = self.bufs[b].name.clone();
        let element = self.bufs[b].element.clone();
        let l = load(&name, index);
        let narrow = self.cfg.features.narrow_casts;
        Some(match (ty, element) {
            (Ty::U32, DataType::U32) | (Ty::I32, DataType::I32) | (Ty::F32, DataType::F32) => l,
            (Ty::U32, DataType::Bool) => cast(DataType::U32, l),
            (Ty::Bool, DataType::Bool) => cast(DataType::Bool, l),
            // Now and then through a u64: a raw value of up to eight bytes reads as a
            // little-endian prefix there (the emitter once failed every such cast).
            (Ty::U32, DataType::U8 | DataType::U16 | DataType::I8 | DataType::I16)
                if self.rng.chance(12) =>
            {
                cast(DataType::U32, cast(DataType::U64, l))
            }
            (Ty::U32, DataType::U8 | DataType::U16) => cast(DataType::U32, l),
            (Ty::U32, DataType::I8 | DataType::I16) if self.rng.chance(50) => {
                cast(DataType::U32, l)
            }
            (Ty::I32, DataType::I8) => {
                if self.rng.chance(70) && narrow {
                    cast(DataType::I32, cast(DataType::I8, l))
                } else {
                    cast(DataType::I32, l)
                }
            }
            (Ty::I32, DataType::I16) => {
                if self.rng.chance(70) && narrow {
                    cast(DataType::I32, cast(DataType::I16, l))
                } else {
                    cast(DataType::I32, l)
                }
            }
            // Checked: a run-time error where the value does not fit in u32 (for an
            // I64 element, a raw 8-byte value, always in the reference).
            (Ty::U32, DataType::U64) if self.rng.chance(10) => cast(DataType::U32, l),
            (Ty::U32, DataType::I64) if self.rng.chance(3) => cast(DataType::U32, l),
            (Ty::U32, DataType::U64 | DataType::I64) if narrow => {
                cast(DataType::U32, cast(DataType::U16, l))
            }
            (Ty::I32, DataType::I64) if self.rng.chance(3) => cast(DataType::I32, l),
            (Ty::I32, DataType::I64) => cast(DataType::I32, cast(DataType::I16, l)),
            (Ty::Bool, DataType::U64 | DataType::I64 | DataType::U8 | DataType::I16) => {
                cast(DataType::Bool, l)
            }
            _ => return None,
        })
    }

    fn load_input(&mut self, ty: Ty, depth: u32) -> Option<Expr> {
        let candidates = self.bufs_where(|b| b.role == Role::Input);
        if candidates.is_empty() {
            return None;
        }
        for _ in 0..4 {
            let b = *self.rng.pick(&candidates);
            if !can_load_as(ty, &self.bufs[b].element) {
                continue;
            }
            let index = self.any_index(b, depth);
            if let Some(e) = self.load_as(ty, b, index) {
                return Some(e);
            }
        }
        None
    }

    fn load_own(&mut self, ty: Ty) -> Option<Expr> {
        let candidates =
            self.bufs_where(|b| b.own_k().is_some() && !b.atomic && can_load_as(ty, &b.element));
        if candidates.is_empty() {
            return None;
        }
        let b = *self.rng.pick(&candidates);
        let index = self.own_index(b);
        self.load_as(ty, b, index)
    }

    fn atomic_own(&mut self, depth: u32) -> Option<Expr> {
        let b = self.own_atomic_buffer()?;
        Some(self.atomic_own_on(b, depth))
    }

    /// A buffer of invocations' own slots that atomics use, if the program has one.
    fn own_atomic_buffer(&mut self) -> Option<usize> {
        let candidates = self.bufs_where(|b| b.own_k().is_some() && b.atomic);
        if candidates.is_empty() || self.cfg.features.own_atomics.is_empty() {
            return None;
        }
        Some(*self.rng.pick(&candidates))
    }

    /// An atomic on the invocation's own slot of buffer `b`.
    fn atomic_own_on(&mut self, b: usize, depth: u32) -> Expr {
        let cfg: &GenConfig = self.cfg;
        let op = *self.rng.pick(&cfg.features.own_atomics);
        let index = self.own_index(b);
        let expected =
            (op == AtomicOp::CompareExchange).then(|| Box::new(self.expr(Ty::U32, depth.min(1))));
        let value = self.expr(Ty::U32, depth.min(1));
        Expr::Atomic {
            op,
            buffer: self.bufs[b].name.as_str().into(),
            index: Box::new(index),
            expected,
            value: Box::new(value),
            ordering: *self.rng.pick(ORDERINGS),
        }
    }

    // ---------------------------------------------------------------- expressions

    /// `BufLen` of a buffer that atomics do not touch (vyre's validator counts BufLen
    /// as a read in its fusion-hazard check).
    fn buf_len(&mut self) -> Expr {
        let plain = self.bufs_where(|b| !b.atomic);
        match plain.is_empty() {
            true => var("lin"),
            false => {
                let b = *self.rng.pick(&plain);
                Expr::BufLen {
                    buffer: self.bufs[b].name.as_str().into(),
                }
            }
        }
    }

    fn leaf(&mut self, ty: Ty) -> Expr {
        if self.literal_leaves {
            return self.lit(ty);
        }
        for _ in 0..8 {
            let choice = self.rng.below(100);
            let picked = match choice {
                0..=24 => Some(self.lit(ty)),
                25..=49 => {
                    let vars: Vec<String> =
                        self.vars_of(ty).iter().map(|v| v.name.clone()).collect();
                    (!vars.is_empty()).then(|| var(self.rng.pick::<String>(&vars)))
                }
                50..=71 => self.load_input(ty, 0),
                72..=81 => self.load_own(ty),
                82..=95 if ty == Ty::U32 && self.elementwise => Some(match self.rng.below(3) {
                    0 => var("lin"),
                    1 => Expr::InvocationId { axis: 0 },
                    _ => self.buf_len(),
                }),
                82..=95 if ty == Ty::U32 && self.cfg.replicated => Some(match self.rng.below(2) {
                    0 => var("lin"),
                    _ => self.buf_len(),
                }),
                82..=95 if ty == Ty::U32 => Some(match self.rng.below(7) {
                    0 | 1 => var("lin"),
                    2 => Expr::InvocationId {
                        axis: self.rng.below(3) as u8,
                    },
                    3 => Expr::LocalId {
                        axis: self.rng.below(3) as u8,
                    },
                    4 => Expr::WorkgroupId {
                        axis: self.rng.below(3) as u8,
                    },
                    _ => self.buf_len(),
                }),
                96..=99 if ty == Ty::U32 => self.atomic_own(0),
                _ => None,
            };
            if let Some(e) = picked {
                return e;
            }
        }
        self.lit(ty)
    }

    fn expr(&mut self, ty: Ty, depth: u32) -> Expr {
        if depth == 0 || self.rng.chance(30) {
            return self.leaf(ty);
        }
        let d = depth - 1;
        match ty {
            Ty::U32 => self.u32_expr(d),
            Ty::I32 => self.i32_expr(d),
            Ty::F32 => self.f32_expr(d),
            Ty::Bool => self.bool_expr(d),
        }
    }

    /// An expression of literals only (no loads, variables, ids or atomics).
    fn constant_expr(&mut self, ty: Ty, d: u32) -> Expr {
        let outer = std::mem::replace(&mut self.literal_leaves, true);
        let e = self.expr(ty, d);
        self.literal_leaves = outer;
        e
    }

    /// `expr(ty, d)`, or a literal-only one `constant_operands` percent of the time.
    fn maybe_constant(&mut self, ty: Ty, d: u32) -> Expr {
        if self.rng.chance(self.cfg.features.constant_operands) {
            self.constant_expr(ty, d)
        } else {
            self.expr(ty, d)
        }
    }

    /// `target(chain(...(inner)))`: 2..=5 casts through integer types.
    fn cast_chain(&mut self, target: DataType, d: u32) -> Expr {
        const STEPS: &[DataType] = &[
            DataType::U8,
            DataType::I8,
            DataType::U16,
            DataType::I16,
            DataType::U32,
            DataType::I32,
            DataType::U64,
            DataType::I64,
        ];
        let mut e = self.other_ty(&[Ty::U32, Ty::I32, Ty::Bool], d);
        for _ in 0..self.rng.range(2, 5) {
            e = cast(self.rng.pick(STEPS).clone(), e);
        }
        cast(target, e)
    }

    fn other_ty(&mut self, choices: &[Ty], d: u32) -> Expr {
        let t = *self.rng.pick(choices);
        self.expr(t, d)
    }

    fn divisor(&mut self, ty: Ty, d: u32) -> Expr {
        let e = self.maybe_constant(ty, d);
        if static_zero(&e) {
            return self.nonzero_lit(ty);
        }
        if ty == Ty::I32 && !self.rng.chance(self.cfg.features.unguarded_division) {
            // Guard against 0 (a reference run-time error). Evaluated twice, so keep it
            // side-effect free: a leaf.
            let leaf = match e {
                Expr::LitI32(_) | Expr::Var(_) => e,
                _ if literal_only(&e) => e,
                _ => self.leaf(Ty::I32),
            };
            if static_zero(&leaf) {
                return self.nonzero_lit(ty);
            }
            return select(
                bin(BinOp::Eq, leaf.clone(), Expr::LitI32(0)),
                Expr::LitI32(*self.rng.pick(&[1, -1, 3])),
                leaf,
            );
        }
        e
    }

    fn u32_expr(&mut self, d: u32) -> Expr {
        let cfg: &GenConfig = self.cfg;
        let f = &cfg.features;
        let weights = [
            32,                                 // binop
            10,                                 // unop
            2,                                  // unpack of i32
            6,                                  // select
            8,                                  // cast
            if f.narrow_casts { 4 } else { 0 }, // narrow round trip
            if f.wide_casts { 3 } else { 0 },   // u64 detour
            3,                                  // own atomic
            if f.cast_chains { 3 } else { 0 },  // cast chain
        ];
        match self.rng.weighted(&weights) {
            0 if !f.u32_binops.is_empty() => {
                let op = *self.rng.pick(&f.u32_binops);
                let division = matches!(op, BinOp::Div | BinOp::Mod);
                let l = if division {
                    self.maybe_constant(Ty::U32, d)
                } else {
                    self.expr(Ty::U32, d)
                };
                let r = if division {
                    self.divisor(Ty::U32, d)
                } else {
                    self.expr(Ty::U32, d)
                };
                bin(op, l, r)
            }
            1 if !f.u32_unops.is_empty() => {
                let op = self.rng.pick(&f.u32_unops).clone();
                un(op, self.expr(Ty::U32, d))
            }
            2 => {
                let op = self
                    .rng
                    .pick(&[
                        UnOp::Unpack4Low,
                        UnOp::Unpack4High,
                        UnOp::Unpack8Low,
                        UnOp::Unpack8High,
                    ])
                    .clone();
                un(op, self.expr(Ty::I32, d))
            }
            3 => {
                let c = self.cond(d);
                select(c, self.expr(Ty::U32, d), self.expr(Ty::U32, d))
            }
            4 => cast(
                DataType::U32,
                self.other_ty(&[Ty::I32, Ty::F32, Ty::Bool], d),
            ),
            5 => {
                let target = self
                    .rng
                    .pick(&[DataType::U8, DataType::U16, DataType::I8, DataType::I16])
                    .clone();
                let inner = self.other_ty(&[Ty::U32, Ty::I32], d);
                cast(DataType::U32, cast(target, inner))
            }
            6 => {
                let inner = self.other_ty(&[Ty::U32, Ty::I32], d);
                let wide = cast(DataType::U64, inner);
                match self.rng.below(3) {
                    // Checked u64 -> u32: a run-time error for negative i32 sources.
                    0 => {
                        let t = self.rng.pick(&[DataType::U64, DataType::I64]).clone();
                        let Expr::Cast { value, .. } = wide else {
                            unreachable!()
                        };
                        cast(DataType::U32, cast(t, *value))
                    }
                    1 => {
                        let op = self
                            .rng
                            .pick(&[UnOp::Popcount, UnOp::Clz, UnOp::Ctz])
                            .clone();
                        cast(DataType::U32, un(op, wide))
                    }
                    _ => {
                        let op = self.rng.pick(&[UnOp::BitNot, UnOp::ReverseBits]).clone();
                        cast(DataType::U32, cast(DataType::U16, un(op, wide)))
                    }
                }
            }
            7 if !self.literal_leaves => self.atomic_own(d).unwrap_or_else(|| self.leaf(Ty::U32)),
            8 => self.cast_chain(DataType::U32, d),
            _ => self.leaf(Ty::U32),
        }
    }

    fn i32_expr(&mut self, d: u32) -> Expr {
        let cfg: &GenConfig = self.cfg;
        let f = &cfg.features;
        let weights = [
            26,                                 // binop
            10,                                 // recast binop
            8,                                  // unop
            5,                                  // select
            8,                                  // cast
            if f.narrow_casts { 4 } else { 0 }, // narrow
            if f.wide_casts { 2 } else { 0 },   // wide
            if f.cast_chains { 3 } else { 0 },  // cast chain
        ];
        match self.rng.weighted(&weights) {
            0 if !f.i32_binops.is_empty() => {
                let op = *self.rng.pick(&f.i32_binops);
                let l = if op == BinOp::Div {
                    self.maybe_constant(Ty::I32, d)
                } else {
                    self.expr(Ty::I32, d)
                };
                let r = if op == BinOp::Div {
                    self.divisor(Ty::I32, d)
                } else {
                    self.expr(Ty::I32, d)
                };
                bin(op, l, r)
            }
            1 if !f.i32_recast_binops.is_empty() => {
                let op = *self.rng.pick(&f.i32_recast_binops);
                let l = if op == BinOp::Mod {
                    self.maybe_constant(Ty::I32, d)
                } else {
                    self.expr(Ty::I32, d)
                };
                let r = if op == BinOp::Mod {
                    self.divisor(Ty::I32, d)
                } else {
                    self.expr(Ty::I32, d)
                };
                cast(DataType::I32, bin(op, l, r))
            }
            2 if !f.i32_unops.is_empty() => {
                let op = self.rng.pick(&f.i32_unops).clone();
                un(op, self.expr(Ty::I32, d))
            }
            3 => {
                let c = self.cond(d);
                select(c, self.expr(Ty::I32, d), self.expr(Ty::I32, d))
            }
            4 => cast(
                DataType::I32,
                self.other_ty(&[Ty::U32, Ty::F32, Ty::Bool], d),
            ),
            5 => {
                let target = self
                    .rng
                    .pick(&[DataType::I8, DataType::I16, DataType::U8, DataType::U16])
                    .clone();
                let inner = self.other_ty(&[Ty::U32, Ty::I32], d);
                cast(DataType::I32, cast(target, inner))
            }
            6 => {
                let inner = self.other_ty(&[Ty::U32, Ty::I32], d);
                let wide = self.rng.pick(&[DataType::U64, DataType::I64]).clone();
                cast(DataType::I32, cast(wide, inner))
            }
            7 => self.cast_chain(DataType::I32, d),
            _ => self.leaf(Ty::I32),
        }
    }

    fn f32_expr(&mut self, d: u32) -> Expr {
        let cfg: &GenConfig = self.cfg;
        let f = &cfg.features;
        let libm = if f.libm_unops.is_empty() { 0 } else { 4 };
        match self.rng.weighted(&[30, 15, 6, 5, 8, libm]) {
            0 if !f.f32_binops.is_empty() => {
                let op = *self.rng.pick(&f.f32_binops);
                let l = self.expr(Ty::F32, d);
                let r = if op == BinOp::Div {
                    self.divisor(Ty::F32, d)
                } else {
                    self.expr(Ty::F32, d)
                };
                bin(op, l, r)
            }
            1 if !f.f32_unops.is_empty() => {
                let op = self.rng.pick(&f.f32_unops).clone();
                un(op, self.expr(Ty::F32, d))
            }
            2 => Expr::Fma {
                a: Box::new(self.expr(Ty::F32, d)),
                b: Box::new(self.expr(Ty::F32, d)),
                c: Box::new(self.expr(Ty::F32, d)),
            },
            3 => {
                let c = self.cond(d);
                select(c, self.expr(Ty::F32, d), self.expr(Ty::F32, d))
            }
            4 => cast(
                DataType::F32,
                self.other_ty(&[Ty::U32, Ty::I32, Ty::Bool], d),
            ),
            5 => {
                let op = self.rng.pick(&f.libm_unops).clone();
                un(op, self.expr(Ty::F32, d))
            }
            _ => self.leaf(Ty::F32),
        }
    }

    fn bool_expr(&mut self, d: u32) -> Expr {
        let cfg: &GenConfig = self.cfg;
        let f = &cfg.features;
        let weights = [
            30,                               // compare
            10,                               // and/or
            6,                                // not
            6,                                // f32 tests
            5,                                // cast
            3,                                // select
            if f.wide_casts { 2 } else { 0 }, // u64 compare
        ];
        match self.rng.weighted(&weights) {
            0 if !f.compare_ops.is_empty() => {
                let ty = *self
                    .rng
                    .pick(&[Ty::U32, Ty::U32, Ty::I32, Ty::F32, Ty::Bool]);
                let op = if ty == Ty::Bool {
                    *self.rng.pick(&[BinOp::Eq, BinOp::Ne])
                } else {
                    *self.rng.pick(&f.compare_ops)
                };
                bin(op, self.expr(ty, d), self.expr(ty, d))
            }
            1 => {
                let op = *self.rng.pick(&[BinOp::And, BinOp::Or]);
                let ty = *self.rng.pick(&[Ty::Bool, Ty::Bool, Ty::U32]);
                bin(op, self.expr(ty, d), self.expr(ty, d))
            }
            2 => {
                let ty = *self.rng.pick(&[Ty::Bool, Ty::U32]);
                un(UnOp::LogicalNot, self.expr(ty, d))
            }
            3 if !f.f32_tests.is_empty() => {
                let op = self.rng.pick(&f.f32_tests).clone();
                un(op, self.expr(Ty::F32, d))
            }
            4 => cast(
                DataType::Bool,
                self.other_ty(&[Ty::U32, Ty::I32, Ty::F32], d),
            ),
            5 => {
                let c = self.cond(d);
                select(c, self.expr(Ty::Bool, d), self.expr(Ty::Bool, d))
            }
            6 => {
                let a = self.other_ty(&[Ty::U32, Ty::I32], d);
                let b = self.other_ty(&[Ty::U32, Ty::I32], d);
                let op = *self.rng.pick(&f.compare_ops);
                bin(op, cast(DataType::U64, a), cast(DataType::U64, b))
            }
            _ => self.leaf(Ty::Bool),
        }
    }

    /// A condition for `If`/`Select`: bool, u32 (truthiness) or a raw Bool-buffer word.
    fn cond(&mut self, d: u32) -> Expr {
        if self.rng.chance(self.cfg.features.constant_operands) {
            let ty = *self.rng.pick(&[Ty::Bool, Ty::Bool, Ty::U32]);
            return self.constant_expr(ty, d);
        }
        match self.rng.below(20) {
            0..=13 => self.expr(Ty::Bool, d),
            14..=15 => self.expr(Ty::U32, d),
            16..=17 => {
                // lin-based: splits the grid.
                let op = *self.rng.pick(&[BinOp::Lt, BinOp::Ge, BinOp::Eq]);
                bin(op, var("lin"), lit_u32(self.rng.below(70)))
            }
            _ => {
                let bools =
                    self.bufs_where(|b| b.role == Role::Input && b.element == DataType::Bool);
                if bools.is_empty() {
                    self.expr(Ty::Bool, d)
                } else {
                    let b = *self.rng.pick(&bools);
                    let index = self.any_index(b, d);
                    load(&self.bufs[b].name.clone(), index)
                }
            }
        }
    }

    /// A workgroup-uniform condition (literals, workgroup ids, buffer lengths).
    fn uniform_cond(&mut self) -> Expr {
        let op = *self.rng.pick(&[BinOp::Lt, BinOp::Eq, BinOp::Ne, BinOp::Ge]);
        let left = match self.rng.below(3) {
            0 | 2 if self.elementwise || self.cfg.replicated => self.buf_len(),
            0 => Expr::WorkgroupId {
                axis: self.rng.below(3) as u8,
            },
            1 => self.buf_len(),
            _ => bin(
                BinOp::Add,
                Expr::WorkgroupId { axis: 0 },
                lit_u32(self.rng.below(3)),
            ),
        };
        bin(op, left, lit_u32(self.rng.below(8)))
    }

    /// A value storable into an element of `element` (vyre's store typing).
    fn store_value(&mut self, element: &DataType) -> Expr {
        let d = self.cfg.max_expr_depth;
        match element {
            DataType::U32 => {
                let ty = *self
                    .rng
                    .pick(&[Ty::U32, Ty::U32, Ty::U32, Ty::Bool, Ty::I32]);
                self.expr(ty, d)
            }
            DataType::I32 => {
                let ty = *self.rng.pick(&[Ty::I32, Ty::I32, Ty::U32]);
                self.expr(ty, d)
            }
            DataType::F32 => self.expr(Ty::F32, d),
            DataType::Bool => {
                let ty = *self.rng.pick(&[Ty::Bool, Ty::U32]);
                self.expr(ty, d)
            }
            DataType::U64 | DataType::I64 => {
                let ty = *self.rng.pick(&[Ty::U32, Ty::I32, Ty::Bool]);
                cast(element.clone(), self.expr(ty, d))
            }
            narrow => {
                let ty = *self.rng.pick(&[Ty::U32, Ty::I32]);
                cast(narrow.clone(), self.expr(ty, d))
            }
        }
    }

    // ---------------------------------------------------------------- statements

    fn block(&mut self, ctx: Ctx, max_len: u32) -> Vec<Node> {
        self.scopes.push(Vec::new());
        let len = self.rng.range(1, max_len.max(1));
        let mut nodes = Vec::new();
        for _ in 0..len {
            if self.budget <= 0 {
                break;
            }
            let node = self.statement(ctx);
            nodes.extend(node);
        }
        // Early return as the last statement of a nested block.
        if !ctx.top_level && !ctx.no_return && self.rng.chance(4) {
            nodes.push(Node::Return);
        }
        self.scopes.pop();
        nodes
    }

    fn nested(&self, ctx: Ctx, uniform: bool) -> Ctx {
        Ctx {
            uniform: ctx.uniform && uniform,
            depth: ctx.depth + 1,
            trip: ctx.trip,
            top_level: false,
            no_return: ctx.no_return,
        }
    }

    fn statement(&mut self, ctx: Ctx) -> Vec<Node> {
        self.budget -= 1;
        let cfg: &GenConfig = self.cfg;
        let features = &cfg.features;
        let has_own = !self
            .bufs_where(|b| b.own_k().is_some() && !b.atomic)
            .is_empty();
        let has_counter = !self
            .bufs_where(|b| matches!(b.role, Role::Counter(_)))
            .is_empty();
        let has_shared = !self.bufs_where(|b| b.role == Role::Shared).is_empty();
        let has_assignable = self.scopes.iter().flatten().any(|v| v.assignable);
        let has_bytes = !self.bufs_where(|b| b.role == Role::BytesSource).is_empty();
        let subgroups = self.unlowered & UNLOWERED_SUBGROUPS != 0;
        let has_bytes_use = self.unlowered & UNLOWERED_BYTES != 0
            && !self
                .bufs_where(|b| matches!(b.role, Role::BytesSource | Role::BytesWritable))
                .is_empty();
        let has_shared_bytes = !self.bufs_where(|b| b.role == Role::SharedBytes).is_empty();
        let has_async = !self.bufs_where(|b| b.role == Role::AsyncSource).is_empty()
            && !self.bufs_where(|b| b.role == Role::AsyncDest).is_empty();
        let has_raw = !self.bufs_where(|b| b.role == Role::RawMirror).is_empty();
        let deep = ctx.depth >= self.cfg.max_nesting;
        // Room for a loop holding a branch: two levels of nesting, twice the trips.
        let room_for_loop_and_branch =
            ctx.depth + 1 < self.cfg.max_nesting && ctx.trip * 2 <= self.cfg.max_trip_product;
        let weights: Vec<u32> = features
            .statements
            .iter()
            .map(|(s, w)| {
                let ok = match s {
                    Stmt::Let => true,
                    Stmt::Assign => has_assignable,
                    Stmt::Store => has_own,
                    Stmt::If | Stmt::Block | Stmt::Region => !deep,
                    Stmt::EarlyReturn => !deep && !ctx.no_return,
                    Stmt::UniformIf => !deep && ctx.uniform,
                    Stmt::Loop => !deep && ctx.trip * 2 <= self.cfg.max_trip_product,
                    Stmt::CounterAtomic => has_counter,
                    Stmt::SharedPhase => has_shared && ctx.uniform,
                    Stmt::Barrier => ctx.uniform && !self.elementwise,
                    Stmt::DivergentBarrier => ctx.uniform && !self.elementwise && !deep,
                    Stmt::BytesStore => has_bytes,
                    Stmt::SubgroupLet | Stmt::SubgroupChanged => subgroups,
                    Stmt::SubgroupTwoTyped => subgroups && !deep,
                    Stmt::SubgroupBranch => subgroups && !deep,
                    Stmt::SubgroupDivergentLoop => subgroups && room_for_loop_and_branch,
                    Stmt::SubgroupAfterReturn => subgroups && !ctx.no_return,
                    Stmt::BytesUse => has_bytes_use && !deep,
                    Stmt::SharedBytesPhase => has_shared_bytes && ctx.uniform,
                    Stmt::AsyncSplit => has_async && !deep,
                    Stmt::RawCopy => has_raw,
                    Stmt::GuardedLoop => room_for_loop_and_branch,
                };
                if ok {
                    *w
                } else {
                    0
                }
            })
            .collect();
        let kind = features.statements[self.rng.weighted(&weights)].0;
        let d = self.cfg.max_expr_depth;
        match kind {
            Stmt::Let => {
                let ty = *self
                    .rng
                    .pick(&[Ty::U32, Ty::U32, Ty::I32, Ty::F32, Ty::F32, Ty::Bool]);
                let value = self.expr(ty, d);
                let name = self.fresh("v");
                self.declare(name.clone(), ty, true);
                vec![Node::Let {
                    name: name.as_str().into(),
                    value,
                }]
            }
            Stmt::Assign => {
                let vars: Vec<(String, Ty)> = self
                    .scopes
                    .iter()
                    .flatten()
                    .filter(|v| v.assignable)
                    .map(|v| (v.name.clone(), v.ty))
                    .collect();
                let (name, ty) = self.rng.pick(&vars).clone();
                let value = self.expr(ty, d);
                vec![Node::Assign {
                    name: name.as_str().into(),
                    value,
                }]
            }
            Stmt::Store => {
                let own = self.bufs_where(|b| b.own_k().is_some() && !b.atomic);
                let b = *self.rng.pick(&own);
                let index = self.own_index(b);
                let element = self.bufs[b].element.clone();
                let value = self.store_value(&element);
                vec![Node::Store {
                    buffer: self.bufs[b].name.as_str().into(),
                    index,
                    value,
                }]
            }
            Stmt::If | Stmt::UniformIf => {
                let uniform = kind == Stmt::UniformIf;
                let cond = if uniform {
                    self.uniform_cond()
                } else {
                    self.cond(d)
                };
                let inner = self.nested(ctx, uniform);
                let then = self.block(inner, 4);
                let otherwise = if self.rng.chance(45) {
                    self.block(inner, 3)
                } else {
                    Vec::new()
                };
                vec![Node::If {
                    cond,
                    then,
                    otherwise,
                }]
            }
            Stmt::Loop => self.loop_stmt(ctx),
            Stmt::BytesStore => self.bytes_store(),
            Stmt::RawCopy => self.raw_copy(),
            Stmt::Block => {
                let inner = self.nested(ctx, true);
                vec![Node::Block(self.block(inner, 4))]
            }
            Stmt::Region => {
                let inner = self.nested(ctx, true);
                let body = self.block(inner, 4);
                vec![Node::Region {
                    generator: (*self.rng.pick(&["fuzz.region", "fuzz.inner"])).into(),
                    source_region: None,
                    body: std::sync::Arc::new(body),
                }]
            }
            Stmt::EarlyReturn => {
                let cond = self.cond(d);
                let inner = self.nested(ctx, false);
                let mut then = if self.rng.chance(50) {
                    self.block(inner, 2)
                } else {
                    Vec::new()
                };
                if !matches!(then.last(), Some(Node::Return)) {
                    then.push(Node::Return);
                }
                vec![Node::If {
                    cond,
                    then,
                    otherwise: Vec::new(),
                }]
            }
            Stmt::CounterAtomic => {
                let counters = self.bufs_where(|b| matches!(b.role, Role::Counter(_)));
                let b = *self.rng.pick(&counters);
                let Role::Counter(op) = self.bufs[b].role.clone() else {
                    unreachable!()
                };
                let len = self.bufs[b].len;
                let index = match self.rng.below(10) {
                    0..=5 => lit_u32(self.rng.below(len)),
                    6 => lit_u32(len + self.rng.below(3)),
                    _ => {
                        let e = self.expr(Ty::U32, 1);
                        if self.rng.chance(70) {
                            bin(BinOp::Mod, e, lit_u32(len))
                        } else {
                            e
                        }
                    }
                };
                let value = self.expr(Ty::U32, d.min(2));
                let name = self.fresh("a");
                vec![Node::Let {
                    name: name.as_str().into(),
                    value: Expr::Atomic {
                        op,
                        buffer: self.bufs[b].name.as_str().into(),
                        index: Box::new(index),
                        expected: None,
                        value: Box::new(value),
                        ordering: *self.rng.pick(ORDERINGS),
                    },
                }]
            }
            Stmt::SharedPhase => self.shared_phase(),
            Stmt::SubgroupLet
            | Stmt::SubgroupBranch
            | Stmt::SubgroupDivergentLoop
            | Stmt::SubgroupAfterReturn
            | Stmt::SubgroupChanged => self.subgroup_stmt(kind, ctx),
            Stmt::SubgroupTwoTyped => self.subgroup_two_typed(ctx),
            Stmt::BytesUse => self.bytes_use(),
            Stmt::SharedBytesPhase => self.shared_bytes_phase(),
            Stmt::AsyncSplit => self.async_split(ctx),
            Stmt::DivergentBarrier => self.divergent_barrier(ctx),
            Stmt::GuardedLoop => self.guarded_loop(ctx),
            Stmt::Barrier => vec![Node::Barrier {
                ordering: *self.rng.pick(BARRIER_ORDERINGS),
            }],
        }
    }

    /// See [`Stmt::DivergentBarrier`]. Mostly the flag's condition holds in every lane or
    /// in none (a local id against the largest workgroup side), so the program runs; else
    /// it is a data-dependent condition, on which the workgroup's lanes usually disagree.
    fn divergent_barrier(&mut self, ctx: Ctx) -> Vec<Node> {
        let flag = self.fresh("c");
        let side = self.cfg.features.workgroups.iter().flatten().max().copied();
        let bound = lit_u32(side.unwrap_or(1) + self.rng.below(3));
        let id = Expr::LocalId {
            axis: self.rng.below(3) as u8,
        };
        let cond = match self.rng.below(10) {
            0..=3 => bin(BinOp::Lt, id, bound),
            4 | 5 => bin(BinOp::Ge, id, bound),
            _ => self.divergent_cond(self.cfg.max_expr_depth),
        };
        let inner = self.nested(ctx, true);
        let mut then = vec![Node::Barrier {
            ordering: *self.rng.pick(BARRIER_ORDERINGS),
        }];
        then.extend(self.block(inner, 3));
        let otherwise = match self.rng.chance(40) {
            true => self.block(inner, 2),
            false => Vec::new(),
        };
        vec![
            Node::Let {
                name: flag.as_str().into(),
                value: lit_u32(0),
            },
            Node::If {
                cond,
                then: vec![Node::Assign {
                    name: flag.as_str().into(),
                    value: lit_u32(1),
                }],
                otherwise: Vec::new(),
            },
            Node::If {
                cond: bin(BinOp::Eq, var(&flag), lit_u32(1)),
                then,
                otherwise,
            },
        ]
    }

    fn loop_stmt(&mut self, ctx: Ctx) -> Vec<Node> {
        let room = (self.cfg.max_trip_product / ctx.trip.max(1)).clamp(1, 6);
        let (from, to, trips, constant) = match self.rng.below(10) {
            0..=5 => {
                let from = self.rng.below(3);
                let to = self.rng.below(room + from + 1);
                (lit_u32(from), lit_u32(to), to.saturating_sub(from), true)
            }
            6 => {
                // Empty: from >= to.
                let to = self.rng.below(3);
                (lit_u32(to + self.rng.below(3)), lit_u32(to), 0, true)
            }
            _ => {
                // Data-dependent but clamped.
                let e = self.expr(Ty::U32, 1);
                let to = match self.rng.below(3) {
                    0 => bin(BinOp::Min, e, lit_u32(room)),
                    1 => bin(BinOp::Mod, e, lit_u32(room + 1)),
                    _ => bin(BinOp::BitAnd, e, lit_u32(room.min(3))),
                };
                (lit_u32(self.rng.below(2)), to, room, false)
            }
        };
        let name = self.fresh("i");
        let inner = Ctx {
            uniform: ctx.uniform && constant,
            depth: ctx.depth + 1,
            trip: ctx.trip * trips.max(1),
            top_level: false,
            no_return: ctx.no_return,
        };
        self.scopes.push(vec![Var {
            name: name.clone(),
            ty: Ty::U32,
            assignable: false,
        }]);
        let body = self.block(inner, 4);
        self.scopes.pop();
        vec![Node::Loop {
            var: name.as_str().into(),
            from,
            to,
            body,
        }]
    }

    /// See [`Stmt::GuardedLoop`]. The body's statements are each a `Let` of a load at
    /// `idx` mixed with another value, an accumulation of one into a variable of the
    /// enclosing scopes, or a store to the invocation's own slot.
    fn guarded_loop(&mut self, ctx: Ctx) -> Vec<Node> {
        let room = (self.cfg.max_trip_product / ctx.trip.max(1)).clamp(1, 6);
        let trips = self.rng.range(1, room + 1);
        let (counter, idx) = (self.fresh("i"), self.fresh("v"));
        let stride = *self.rng.pick(&[1, 2, 4, 32, 64]);
        let lane = self.expr(Ty::U32, 1);
        let bound = match self.rng.below(3) {
            0 => lit_u32(self.rng.below(2 * stride * trips + 2)),
            1 => self.buf_len(),
            _ => self.expr(Ty::U32, 1),
        };
        self.scopes.push(vec![Var {
            name: counter.clone(),
            ty: Ty::U32,
            assignable: false,
        }]);
        self.declare(idx.clone(), Ty::U32, false);
        self.scopes.push(Vec::new());
        let mut body = Vec::new();
        for _ in 0..self.rng.range(1, 4) {
            body.extend(self.guarded_statement(&idx));
        }
        self.scopes.pop();
        self.scopes.pop();
        let index = bin(
            BinOp::Add,
            bin(BinOp::Mul, var(&counter), lit_u32(stride)),
            lane,
        );
        vec![Node::Loop {
            var: counter.as_str().into(),
            from: lit_u32(0),
            to: lit_u32(trips),
            body: vec![
                Node::Let {
                    name: idx.as_str().into(),
                    value: index,
                },
                Node::If {
                    cond: bin(BinOp::Lt, var(&idx), bound),
                    then: body,
                    otherwise: Vec::new(),
                },
            ],
        }]
    }

    /// One statement of a [`Stmt::GuardedLoop`]'s branch (none where no input buffer
    /// loads as the type drawn).
    fn guarded_statement(&mut self, idx: &str) -> Vec<Node> {
        let ty = *self
            .rng
            .pick(&[Ty::U32, Ty::U32, Ty::I32, Ty::F32, Ty::F32]);
        let inputs = self.bufs_where(|b| b.role == Role::Input && can_load_as(ty, &b.element));
        if inputs.is_empty() {
            return Vec::new();
        }
        let b = *self.rng.pick(&inputs);
        let Some(loaded) = self.load_as(ty, b, var(idx)) else {
            return Vec::new();
        };
        let ops = match ty {
            Ty::F32 => [BinOp::Add, BinOp::Mul, BinOp::Sub],
            _ => [BinOp::Add, BinOp::Mul, BinOp::BitXor],
        };
        let op = *self.rng.pick(&ops);
        let accumulators: Vec<String> = (self.vars_of(ty).into_iter())
            .filter(|v| v.assignable)
            .map(|v| v.name.clone())
            .collect();
        let own = self.bufs_where(|b| b.own_k().is_some() && !b.atomic);
        match self.rng.below(3) {
            0 if !accumulators.is_empty() => {
                let name = self.rng.pick(&accumulators).clone();
                let value = bin(op, var(&name), loaded);
                vec![Node::Assign {
                    name: name.as_str().into(),
                    value,
                }]
            }
            1 if !own.is_empty() => {
                let target = *self.rng.pick(&own);
                let index = self.own_index(target);
                let value = self.store_value(&self.bufs[target].element.clone());
                vec![Node::Store {
                    buffer: self.bufs[target].name.as_str().into(),
                    index,
                    value: match self.bufs[target].element == DataType::F32 && ty == Ty::F32 {
                        true => bin(op, value, loaded),
                        false => value,
                    },
                }]
            }
            _ => {
                let other = self.expr(ty, 1);
                let name = self.fresh("v");
                self.declare(name.clone(), ty, true);
                vec![Node::Let {
                    name: name.as_str().into(),
                    value: bin(op, loaded, other),
                }]
            }
        }
    }

    /// `sh[lid] = v; barrier; let x = sh[any]...; barrier` (uniform control flow only).
    /// See [`Stmt::RawCopy`].
    fn raw_copy(&mut self) -> Vec<Node> {
        let source = self.bufs_where(|b| b.role == Role::RawSource)[0];
        let mirror = self.bufs_where(|b| b.role == Role::RawMirror)[0];
        let (source_name, mirror_name) = (
            self.bufs[source].name.clone(),
            self.bufs[mirror].name.clone(),
        );
        let at = self.fresh("t");
        let index = if self.rng.chance(20) {
            // Counted from the end: the reference's BufLen of the type (two 4-bit elements
            // a byte, zero-stride elements by their size), wrapping below zero.
            let back = lit_u32(self.rng.range(1, 4));
            let len = Expr::BufLen {
                buffer: source_name.as_str().into(),
            };
            bin(BinOp::Sub, len, back)
        } else {
            self.any_index(source, 1)
        };
        let mut nodes = vec![Node::Let {
            name: at.as_str().into(),
            value: index,
        }];
        self.declare(at.clone(), Ty::U32, false);
        let here = load(&source_name, var(&at));
        let mut value = if self.raw_parity {
            let next = load(&source_name, bin(BinOp::Add, var(&at), lit_u32(1)));
            let cond = if self.rng.chance(6) {
                // Raw values to the reference's operators: a run-time error.
                bin(BinOp::Eq, here.clone(), next.clone())
            } else {
                let parity = bin(BinOp::BitAnd, var(&at), lit_u32(1));
                bin(BinOp::Eq, parity, lit_u32(0))
            };
            Expr::select(cond, here, next)
        } else {
            here
        };
        if self.rng.chance(35) {
            let held = self.fresh("raw");
            nodes.push(Node::Let {
                name: held.as_str().into(),
                value,
            });
            value = var(&held);
        }
        nodes.push(Node::Store {
            buffer: mirror_name.as_str().into(),
            index: var(&at),
            value,
        });
        nodes
    }

    /// `mirror[t] = source[t]` (through a `Let` of the load or not), or
    /// `own_u32[own] = source[any]` (the first four bytes of the rest, zero-padded).
    fn bytes_store(&mut self) -> Vec<Node> {
        let sources = self.bufs_where(|b| b.role == Role::BytesSource);
        let source = *self.rng.pick(&sources);
        let source_name = self.bufs[source].name.clone();
        let mirrors = self.bufs_where(|b| b.role == Role::BytesMirror);
        let words =
            self.bufs_where(|b| b.own_k().is_some() && !b.atomic && b.element == DataType::U32);
        if !mirrors.is_empty() && (words.is_empty() || self.rng.chance(60)) {
            let mirror = self.bufs[*self.rng.pick(&mirrors)].name.clone();
            let at = self.fresh("t");
            let index = self.any_index(source, 1);
            let mut nodes = vec![Node::Let {
                name: at.as_str().into(),
                value: index,
            }];
            self.declare(at.clone(), Ty::U32, false);
            let value = if self.rng.chance(30) {
                let view = self.fresh("bytes");
                nodes.push(Node::Let {
                    name: view.as_str().into(),
                    value: load(&source_name, var(&at)),
                });
                var(&view)
            } else {
                load(&source_name, var(&at))
            };
            nodes.push(Node::Store {
                buffer: mirror.as_str().into(),
                index: var(&at),
                value,
            });
            return nodes;
        }
        if words.is_empty() {
            return Vec::new();
        }
        let b = *self.rng.pick(&words);
        let index = self.own_index(b);
        let from = self.any_index(source, 1);
        vec![Node::Store {
            buffer: self.bufs[b].name.as_str().into(),
            index,
            value: load(&source_name, from),
        }]
    }

    // ------------------------------------------------------------ not yet lowered

    /// A scope of up to `max_len` random statements followed by `tail`'s nodes, which
    /// see the scope's variables.
    fn block_with(
        &mut self,
        ctx: Ctx,
        max_len: u32,
        tail: impl FnOnce(&mut Self) -> Vec<Node>,
    ) -> Vec<Node> {
        self.scopes.push(Vec::new());
        let mut nodes = Vec::new();
        for _ in 0..self.rng.range(0, max_len) {
            if self.budget <= 0 {
                break;
            }
            nodes.extend(self.statement(ctx));
        }
        nodes.extend(tail(self));
        self.scopes.pop();
        nodes
    }

    /// A condition that differs between invocations (never literal-only, so the branch
    /// really diverges).
    fn divergent_cond(&mut self, d: u32) -> Expr {
        let c = if self.rng.chance(50) {
            self.cond(d)
        } else {
            Expr::LitBool(true)
        };
        if !literal_only(&c) {
            return c;
        }
        let id = if self.rng.chance(70) {
            var("lin")
        } else {
            Expr::LocalId { axis: 0 }
        };
        match self.rng.below(3) {
            0 => bin(BinOp::BitAnd, id, lit_u32(1 << self.rng.below(3))),
            _ => {
                let op = *self.rng.pick(&[BinOp::Lt, BinOp::Ge, BinOp::Eq, BinOp::Ne]);
                bin(op, id, lit_u32(self.rng.below(40)))
            }
        }
    }

    /// A subgroup ballot, shuffle or reduction over a random operand, and its type.
    fn subgroup_value(&mut self) -> (Expr, Ty) {
        let d = self.cfg.max_expr_depth.min(2);
        match self.rng.below(3) {
            0 => (
                Expr::SubgroupBallot {
                    cond: Box::new(self.cond(d)),
                },
                Ty::U32,
            ),
            1 => {
                let ty = *self.rng.pick(&[Ty::U32, Ty::U32, Ty::F32]);
                let value = self.subgroup_operand(ty, d);
                (self.shuffle(value), ty)
            }
            _ => {
                let ty = *self.rng.pick(&[Ty::U32, Ty::U32, Ty::F32]);
                let value = self.subgroup_operand(ty, d);
                (self.reduce(ty, value), ty)
            }
        }
    }

    /// A subgroup operand: half the time any expression (its variables may be
    /// undeclared in lanes that took another branch or returned, a run-time error in the
    /// reference), half the time one every lane can evaluate (ids, input loads,
    /// literals), so that many of these programs run on the reference.
    fn subgroup_operand(&mut self, ty: Ty, d: u32) -> Expr {
        let nesting = self.unlowered & UNLOWERED_SUBGROUPS != 0 && !self.in_nested_operand;
        if nesting && self.rng.chance(20) {
            return self.nested_operand(ty, d);
        }
        if self.rng.chance(50) {
            return self.expr(ty, d);
        }
        let id = match self.rng.below(3) {
            0 => Expr::LocalId { axis: 0 },
            _ => var("lin"),
        };
        let loaded = self.load_input(ty, 0);
        match (ty, loaded) {
            (_, Some(l)) if self.rng.chance(50) => l,
            (Ty::F32, _) => cast(DataType::F32, id),
            _ => {
                let op = *self
                    .rng
                    .pick(&[BinOp::Add, BinOp::Mul, BinOp::BitXor, BinOp::Shr]);
                bin(op, id, lit_u32(self.rng.below(9)))
            }
        }
    }

    /// An operand holding another subgroup operation between two atomics on invocations'
    /// own slots (where the program has such a buffer; of one buffer, the reference runs
    /// the operand lane by lane, the nested operation whole in each lane's evaluation).
    fn nested_operand(&mut self, ty: Ty, d: u32) -> Expr {
        self.in_nested_operand = true;
        let inner = match (ty, self.rng.below(3)) {
            (Ty::U32, 0) => Expr::SubgroupBallot {
                cond: Box::new(self.cond(d)),
            },
            (_, 1) => {
                let value = self.subgroup_operand(ty, d);
                self.shuffle(value)
            }
            _ => {
                let value = self.subgroup_operand(ty, d);
                self.reduce(ty, value)
            }
        };
        self.in_nested_operand = false;
        let buffer = self.own_atomic_buffer();
        let atomic = |g: &mut Self| match buffer {
            Some(b) => g.atomic_own_on(b, d),
            None => g.expr(Ty::U32, d),
        };
        let (before, after) = (atomic(self), atomic(self));
        match ty {
            Ty::F32 => bin(
                BinOp::Add,
                bin(BinOp::Add, cast(DataType::F32, before), inner),
                cast(DataType::F32, after),
            ),
            _ => bin(BinOp::Add, bin(BinOp::BitXor, before, inner), after),
        }
    }

    fn shuffle(&mut self, value: Expr) -> Expr {
        let lane = match self.rng.below(4) {
            // Past the subgroup too (the reference reads 0 there).
            0 => lit_u32(self.rng.below(40)),
            1 => bin(
                BinOp::BitAnd,
                bin(BinOp::Add, var("lin"), lit_u32(self.rng.range(1, 31))),
                lit_u32(31),
            ),
            2 => self.expr(Ty::U32, 1),
            _ => bin(BinOp::BitXor, Expr::LocalId { axis: 0 }, lit_u32(1)),
        };
        Expr::SubgroupShuffle {
            value: Box::new(value),
            lane: Box::new(lane),
        }
    }

    fn reduce(&mut self, ty: Ty, value: Expr) -> Expr {
        use SubgroupReduceOp as R;
        // The reference folds bitwise operators over integer lanes only.
        let op = if ty == Ty::F32 {
            *self.rng.pick(&[R::Add, R::Mul, R::Min, R::Max])
        } else {
            *self
                .rng
                .pick(&[R::Add, R::Mul, R::Min, R::Max, R::And, R::Or, R::Xor])
        };
        Expr::SubgroupReduce {
            op,
            value: Box::new(value),
        }
    }

    /// `let g = <subgroup op>`.
    fn subgroup_let(&mut self) -> Vec<Node> {
        let (value, ty) = self.subgroup_value();
        self.let_fresh_g(value, ty)
    }

    /// `let g = value`, a fresh `g` of type `ty` that later statements may read and assign.
    fn let_fresh_g(&mut self, value: Expr, ty: Ty) -> Vec<Node> {
        let name = self.fresh("g");
        self.declare(name.clone(), ty, true);
        vec![Node::Let {
            name: name.as_str().into(),
            value,
        }]
    }

    /// A subgroup operation over `x` (of type `ty`), bound by a `Let`.
    fn subgroup_over(&mut self, x: &str, ty: Ty) -> Vec<Node> {
        let (value, result) = match self.rng.below(3) {
            0 if ty == Ty::U32 => (
                Expr::SubgroupBallot {
                    cond: Box::new(bin(BinOp::Gt, var(x), lit_u32(self.rng.below(64)))),
                },
                Ty::U32,
            ),
            1 => (self.shuffle(var(x)), ty),
            _ => (self.reduce(ty, var(x)), ty),
        };
        self.let_fresh_g(value, result)
    }

    fn subgroup_stmt(&mut self, kind: Stmt, ctx: Ctx) -> Vec<Node> {
        let d = self.cfg.max_expr_depth;
        match kind {
            Stmt::SubgroupBranch => {
                let cond = self.divergent_cond(d);
                let inner = self.nested(ctx, false);
                let then = self.block_with(inner, 2, Self::subgroup_let);
                let otherwise = if self.rng.chance(30) {
                    self.block_with(inner, 2, Self::subgroup_let)
                } else {
                    Vec::new()
                };
                vec![Node::If {
                    cond,
                    then,
                    otherwise,
                }]
            }
            Stmt::SubgroupDivergentLoop => {
                let cond = self.divergent_cond(d);
                let inner = self.nested(ctx, false);
                let then = self.block_with(inner, 1, |g| g.subgroup_loop(inner));
                vec![Node::If {
                    cond,
                    then,
                    otherwise: Vec::new(),
                }]
            }
            Stmt::SubgroupAfterReturn => {
                let cond = self.divergent_cond(d);
                let inner = self.nested(ctx, false);
                let then = self.block_with(inner, 1, |_| vec![Node::Return]);
                let mut nodes = vec![Node::If {
                    cond,
                    then,
                    otherwise: Vec::new(),
                }];
                nodes.extend(self.subgroup_let());
                nodes
            }
            Stmt::SubgroupChanged => {
                let ty = *self.rng.pick(&[Ty::U32, Ty::U32, Ty::F32]);
                let x = self.fresh("x");
                let mut nodes = vec![Node::Let {
                    name: x.as_str().into(),
                    value: self.expr(ty, d),
                }];
                self.declare(x.clone(), ty, true);
                let cond = self.divergent_cond(d);
                let inner = self.nested(ctx, false);
                let inside = self.rng.chance(40);
                let then = self.block_with(inner, 1, |g| {
                    let mut tail = vec![Node::Assign {
                        name: x.as_str().into(),
                        value: g.expr(ty, d),
                    }];
                    if inside {
                        tail.extend(g.subgroup_over(&x, ty));
                    }
                    tail
                });
                nodes.push(Node::If {
                    cond,
                    then,
                    otherwise: Vec::new(),
                });
                if !inside {
                    nodes.extend(self.subgroup_over(&x, ty));
                }
                nodes
            }
            _ => self.subgroup_let(),
        }
    }

    /// See [`Stmt::SubgroupTwoTyped`]: `x` is a u32, an i32 or an f32 on each side (two
    /// different ones); its operations are a ballot of `x` itself (each lane's own
    /// truthiness), a shuffle or a reduction (mixed u32 and float lanes, and i32 lanes,
    /// fail in the reference).
    fn subgroup_two_typed(&mut self, ctx: Ctx) -> Vec<Node> {
        let wide = self.bufs_where(|b| b.role == Role::WideFloats);
        if !wide.is_empty() && self.rng.chance(50) {
            return self.subgroup_f64_and_f32(ctx, wide[0]);
        }
        let d = self.cfg.max_expr_depth;
        let first = *self.rng.pick(&[Ty::U32, Ty::F32, Ty::I32]);
        let second = *self.rng.pick(match first {
            Ty::U32 => &[Ty::F32, Ty::I32],
            Ty::F32 => &[Ty::U32, Ty::I32],
            _ => &[Ty::U32, Ty::F32],
        });
        let x = self.fresh("x");
        let cond = self.divergent_cond(d);
        let inner = self.nested(ctx, false);
        let returns = !ctx.no_return && self.rng.chance(35);
        let bind = |g: &mut Self, ty: Ty| {
            let value = g.expr(ty, d);
            g.declare(x.clone(), ty, false);
            Node::Let {
                name: x.as_str().into(),
                value,
            }
        };
        let then = self.block_with(inner, 1, |g| match returns {
            true => vec![bind(g, first), Node::Return],
            false => {
                let mut nodes = vec![bind(g, first)];
                nodes.extend(g.subgroup_over_two_typed(&x, first));
                nodes
            }
        });
        if returns {
            let mut nodes = vec![Node::If {
                cond,
                then,
                otherwise: Vec::new(),
            }];
            nodes.push(bind(self, second));
            nodes.extend(self.subgroup_over_two_typed(&x, second));
            return nodes;
        }
        let otherwise = self.block_with(inner, 1, |g| {
            let mut nodes = vec![bind(g, second)];
            nodes.extend(g.subgroup_over_two_typed(&x, second));
            nodes
        });
        vec![Node::If {
            cond,
            then,
            otherwise,
        }]
    }

    /// [`Stmt::SubgroupTwoTyped`] with `x` an f64 load of `fd` on one side and an f32 on
    /// the other: the f32 side's shuffles hand the f64 lanes' values over whole (the
    /// reference's one `Value::Float`), which then meet f32 code (see
    /// [`Gen::f32_lane_ops`]). The f64 side only binds `x` (vyre's validator types it
    /// f64, which no f32 expression takes).
    fn subgroup_f64_and_f32(&mut self, ctx: Ctx, fd: usize) -> Vec<Node> {
        let d = self.cfg.max_expr_depth;
        let x = self.fresh("x");
        let cond = self.divergent_cond(d);
        let inner = self.nested(ctx, false);
        let returns = !ctx.no_return && self.rng.chance(35);
        let f64_first = self.rng.chance(50) || returns;
        let wide_let = |g: &mut Self| {
            let index = g.any_index(fd, 1);
            Node::let_bind(&x, Expr::load("fd", index))
        };
        let f32_side = |g: &mut Self| {
            let mut nodes = vec![Node::let_bind(&x, g.expr(Ty::F32, d))];
            g.declare(x.clone(), Ty::F32, false);
            nodes.extend(g.f32_lane_ops(&x));
            nodes
        };
        if returns {
            let then = self.block_with(inner, 1, |g| vec![wide_let(g), Node::Return]);
            let mut nodes = vec![Node::if_then(cond, then)];
            nodes.extend(f32_side(self));
            return nodes;
        }
        let mut sides = [
            self.block_with(inner, 1, |g| vec![wide_let(g)]),
            self.block_with(inner, 1, f32_side),
        ];
        if !f64_first {
            sides.reverse();
        }
        let [then, otherwise] = sides;
        vec![Node::if_then_else(cond, then, otherwise)]
    }

    /// Operations over `x` at the f32 lanes whose subgroup's other lanes hold it as an
    /// f64, and uses of what they give: a shuffle bound by a `Let`, assigned to `x`
    /// itself (an in-place update), or chosen by a `Select`; a reduction; then the value
    /// cast to an integer, tested for truth, computed with, stored, or assigned to an
    /// outer f32 variable.
    fn f32_lane_ops(&mut self, x: &str) -> Vec<Node> {
        let d = self.cfg.max_expr_depth.min(3);
        let (mut nodes, g) = match self.rng.below(5) {
            0 => {
                let shuffled = self.shuffle(var(x));
                (vec![Node::assign(x, shuffled)], x.to_string())
            }
            1 => {
                let (shuffled, other) = (self.shuffle(var(x)), self.expr(Ty::F32, d));
                let pick = self.cond(d);
                let g = self.fresh("g");
                let value = Expr::select(pick, shuffled, other);
                (vec![Node::let_bind(&g, value)], g)
            }
            2 => {
                let reduced = self.reduce(Ty::F32, var(x));
                let g = self.fresh("g");
                (vec![Node::let_bind(&g, reduced)], g)
            }
            _ => {
                let g = self.fresh("g");
                (vec![Node::let_bind(&g, self.shuffle(var(x)))], g)
            }
        };
        self.declare(g.clone(), Ty::F32, true);
        for _ in 0..self.rng.range(1, 2) {
            nodes.extend(self.f32_use(&g));
        }
        nodes
    }

    /// One use of the f32 variable `g`, which may hold an f64 lane's value.
    fn f32_use(&mut self, g: &str) -> Vec<Node> {
        let d = self.cfg.max_expr_depth.min(3);
        let outer: Vec<String> = (self.vars_of(Ty::F32).into_iter())
            .filter(|v| v.assignable && v.name != g)
            .map(|v| v.name.clone())
            .collect();
        let stores =
            self.bufs_where(|b| b.own_k().is_some() && !b.atomic && b.element == DataType::F32);
        match self.rng.below(5) {
            0 if !outer.is_empty() => {
                let y = self.rng.pick(&outer).clone();
                let value = match self.rng.chance(50) {
                    true => var(g),
                    false => Expr::select(self.cond(d), var(g), var(&y)),
                };
                vec![Node::assign(&y, value)]
            }
            1 if !stores.is_empty() => {
                let b = *self.rng.pick(&stores);
                let index = self.own_index(b);
                vec![Node::store(&self.bufs[b].name, index, var(g))]
            }
            2 => {
                let truth = Expr::cast(DataType::Bool, var(g));
                let value = Expr::select(truth, lit_u32(1), lit_u32(2));
                self.let_fresh_g(value, Ty::U32)
            }
            3 => {
                let (target, ty) = match self.rng.chance(50) {
                    true => (DataType::U32, Ty::U32),
                    false => (DataType::I32, Ty::I32),
                };
                self.let_fresh_g(Expr::cast(target, var(g)), ty)
            }
            _ => {
                let other = self.expr(Ty::F32, d);
                let op = *self.rng.pick(&[BinOp::Add, BinOp::Mul, BinOp::Sub]);
                self.let_fresh_g(bin(op, var(g), other), Ty::F32)
            }
        }
    }

    /// `let g = <ballot of x | shuffle of x | reduction of x>`, `x` of type `ty` here.
    fn subgroup_over_two_typed(&mut self, x: &str, ty: Ty) -> Vec<Node> {
        let (value, result) = match self.rng.below(4) {
            0 | 1 => (
                Expr::SubgroupBallot {
                    cond: Box::new(var(x)),
                },
                Ty::U32,
            ),
            2 => (self.shuffle(var(x)), ty),
            _ => (self.reduce(ty, var(x)), ty),
        };
        self.let_fresh_g(value, result)
    }

    /// A short loop whose body ends with a subgroup operation (for a divergent branch).
    fn subgroup_loop(&mut self, ctx: Ctx) -> Vec<Node> {
        let room = (self.cfg.max_trip_product / ctx.trip.max(1)).clamp(1, 4);
        let from = self.rng.below(2);
        let to = if self.rng.chance(60) {
            lit_u32(from + self.rng.range(1, room))
        } else {
            let e = self.expr(Ty::U32, 1);
            bin(BinOp::Min, e, lit_u32(from + room))
        };
        let name = self.fresh("i");
        let inner = Ctx {
            uniform: false,
            depth: ctx.depth + 1,
            trip: ctx.trip * room,
            top_level: false,
            no_return: ctx.no_return,
        };
        self.scopes.push(vec![Var {
            name: name.clone(),
            ty: Ty::U32,
            assignable: false,
        }]);
        let body = self.block_with(inner, 2, Self::subgroup_let);
        self.scopes.pop();
        vec![Node::Loop {
            var: name.as_str().into(),
            from: lit_u32(from),
            to,
            body,
        }]
    }

    /// One use of a bytes load (the rest of a bytes buffer) that vyre's validator accepts
    /// (issue 17; lowered since emitter v13 except a `Let` of a load from a buffer the
    /// program writes whose variable is read); the arithmetic and comparison forms are
    /// run-time errors in the reference. The validator rejects casts (V012, V023) and
    /// unary operators (V101) of bytes, bitwise operators and shifts (V091, V094), bytes
    /// `If` conditions (V123), comparisons of bytes with other types (V096) and selects
    /// of a view and a fixed-size value (V029; the fixed-size arm cannot be cast to bytes,
    /// V023), so the reference never runs those and none is generated.
    fn bytes_use(&mut self) -> Vec<Node> {
        let d = self.cfg.max_expr_depth.min(3);
        let readable = self.bufs_where(|b| b.role == Role::BytesSource);
        let writable = self.bufs_where(|b| b.role == Role::BytesWritable);
        let any: Vec<usize> = readable.iter().chain(&writable).copied().collect();
        let words =
            self.bufs_where(|b| b.own_k().is_some() && !b.atomic && b.element == DataType::U32);
        let view = |g: &mut Self, from: &[usize]| {
            let b = *g.rng.pick(from);
            let index = g.any_index(b, 1);
            load(&g.bufs[b].name.clone(), index)
        };
        // Binds `value` (its type unknown to the generator, so never read again).
        let bind = |g: &mut Self, value: Expr| {
            let name = g.fresh("y");
            vec![Node::Let {
                name: name.as_str().into(),
                value,
            }]
        };
        // Stores `value` into an own u32 slot (its first four bytes), or binds it.
        let keep = |g: &mut Self, value: Expr| match words.is_empty() {
            true => bind(g, value),
            false => {
                let b = *g.rng.pick(&words);
                let index = g.own_index(b);
                vec![Node::Store {
                    buffer: g.bufs[b].name.as_str().into(),
                    index,
                    value,
                }]
            }
        };
        let inputs = self.bufs_where(|b| b.role == Role::Input);
        match self.rng.below(7) {
            0 if !inputs.is_empty() => {
                // As an index.
                let b = *self.rng.pick(&inputs);
                let index = view(self, &any);
                bind(self, load(&self.bufs[b].name.clone(), index))
            }
            0 | 1 => {
                // As a select condition.
                let cond = view(self, &any);
                let value = select(cond, self.expr(Ty::U32, d), self.expr(Ty::U32, d));
                keep(self, value)
            }
            2 => {
                // Arithmetic: a run-time error in the reference.
                let op = *self.rng.pick(&[BinOp::Add, BinOp::Sub, BinOp::Mul]);
                let (a, b) = (view(self, &any), self.expr(Ty::U32, d));
                let value = if self.rng.chance(50) {
                    bin(op, a, b)
                } else {
                    bin(op, b, a)
                };
                bind(self, value)
            }
            3 => {
                // A comparison of two views: a run-time error in the reference.
                let op = *self.rng.pick(&self.cfg.features.compare_ops.clone());
                let value = bin(op, view(self, &any), view(self, &any));
                bind(self, value)
            }
            4 => {
                // Assign of a view.
                let from = if readable.is_empty() { &any } else { &readable };
                let name = self.fresh("y");
                let first = view(self, from);
                let second = view(self, from);
                let mut nodes = vec![
                    Node::Let {
                        name: name.as_str().into(),
                        value: first,
                    },
                    Node::Assign {
                        name: name.as_str().into(),
                        value: second,
                    },
                ];
                nodes.extend(keep(self, var(&name)));
                nodes
            }
            5 => {
                // A subgroup operand: a ballot's condition (each lane's truthiness), a
                // shuffle's lane (its u32 reading: a run-time error past four bytes), a
                // view variable in either (read per lane, where the lane is). Shuffled or
                // reduced views are the reference's run-time error.
                let subgroup = |g: &mut Self, operand: Expr| match g.rng.below(4) {
                    0 | 1 => Expr::SubgroupBallot {
                        cond: Box::new(operand),
                    },
                    2 => {
                        let value = g.expr(Ty::U32, 1);
                        Expr::SubgroupShuffle {
                            value: Box::new(value),
                            lane: Box::new(operand),
                        }
                    }
                    _ => g.reduce(Ty::U32, operand),
                };
                let from = readable_or(&readable, &any);
                if self.rng.chance(50) {
                    let operand = view(self, &from);
                    let value = subgroup(self, operand);
                    return keep(self, value);
                }
                let name = self.fresh("y");
                let mut nodes = vec![Node::Let {
                    name: name.as_str().into(),
                    value: view(self, &from),
                }];
                let value = subgroup(self, var(&name));
                nodes.extend(keep(self, value));
                nodes
            }
            _ => {
                // A `Let` of a load from a writable bytes buffer; sometimes the buffer is
                // then stored to before the variable is read (the reference reads the
                // bytes as they were at the `Let`): a copy of its bytes onto themselves,
                // which changes nothing, so invocations never race.
                let from = if writable.is_empty() { &any } else { &writable };
                let name = self.fresh("y");
                let mut nodes = vec![Node::Let {
                    name: name.as_str().into(),
                    value: view(self, from),
                }];
                if !writable.is_empty() && self.rng.chance(50) {
                    let b = *self.rng.pick(&writable);
                    let buffer = self.bufs[b].name.clone();
                    let at = self.any_index(b, 1);
                    nodes.push(Node::Store {
                        buffer: buffer.as_str().into(),
                        index: at.clone(),
                        value: load(&buffer, at),
                    });
                }
                if self.rng.chance(70) {
                    nodes.extend(keep(self, var(&name)));
                }
                nodes
            }
        }
    }

    /// `shb[lid * 4] = u32; barrier; own[..] = shb[any]..; barrier`: each invocation
    /// writes its own four bytes, and reads happen between barriers.
    fn shared_bytes_phase(&mut self) -> Vec<Node> {
        let shared = self.bufs_where(|b| b.role == Role::SharedBytes);
        let b = *self.rng.pick(&shared);
        let name = self.bufs[b].name.clone();
        let count = self.bufs[b].count;
        let words =
            self.bufs_where(|b| b.own_k().is_some() && !b.atomic && b.element == DataType::U32);
        let value = self.expr(Ty::U32, self.cfg.max_expr_depth.min(3));
        let mut nodes = vec![
            Node::Store {
                buffer: name.as_str().into(),
                index: bin(BinOp::Mul, var("lid"), lit_u32(4)),
                value,
            },
            Node::Barrier {
                ordering: *self.rng.pick(BARRIER_ORDERINGS),
            },
        ];
        for _ in 0..self.rng.range(1, 2) {
            let index = match self.rng.below(3) {
                0 => lit_u32(self.rng.below(count + 2)),
                1 => bin(
                    BinOp::Mod,
                    bin(
                        BinOp::Add,
                        bin(BinOp::Mul, var("lid"), lit_u32(4)),
                        lit_u32(self.rng.range(1, 8)),
                    ),
                    lit_u32(count.max(1)),
                ),
                _ => self.expr(Ty::U32, 1),
            };
            let value = load(&name, index);
            if words.is_empty() {
                let y = self.fresh("y");
                nodes.push(Node::Let {
                    name: y.as_str().into(),
                    value,
                });
            } else {
                let w = *self.rng.pick(&words);
                let index = self.own_index(w);
                nodes.push(Node::Store {
                    buffer: self.bufs[w].name.as_str().into(),
                    index,
                    value,
                });
            }
        }
        nodes.push(Node::Barrier {
            ordering: *self.rng.pick(BARRIER_ORDERINGS),
        });
        nodes
    }

    /// An async copy (`asrc` -> `adst`) whose start and wait are in different blocks.
    /// Every invocation copies the same bytes to the same place (literal offsets and
    /// sizes), so the copies never race. No `Return` is generated between start and
    /// wait, except in the one shape that leaves some invocations' copies pending (a
    /// run-time error in the reference, which the backend must raise too).
    fn async_split(&mut self, ctx: Ctx) -> Vec<Node> {
        let d = self.cfg.max_expr_depth;
        let src = self.bufs[*self
            .rng
            .pick(&self.bufs_where(|b| b.role == Role::AsyncSource))]
        .clone();
        let dst = self.bufs[*self
            .rng
            .pick(&self.bufs_where(|b| b.role == Role::AsyncDest))]
        .clone();
        let tag = self.fresh("tag");
        let aligned = self.rng.chance(70);
        let unit = if aligned { 4 } else { 1 };
        let span = src.len.min(dst.len) * 4 / unit;
        let size = self.rng.range(1, span) * unit;
        // Offset 0 in both directions: every copy into `adst` writes `asrc[j]` to byte j,
        // so copies of different workgroups (which the reference runs one after another
        // and the GPU at once) never race with different bytes.
        let offset = 0;
        let start = if self.rng.chance(60) {
            Node::AsyncLoad {
                source: src.name.as_str().into(),
                destination: dst.name.as_str().into(),
                offset: Box::new(lit_u32(offset)),
                size: Box::new(lit_u32(size)),
                tag: tag.as_str().into(),
            }
        } else {
            Node::AsyncStore {
                source: src.name.as_str().into(),
                destination: dst.name.as_str().into(),
                offset: Box::new(lit_u32(offset)),
                size: Box::new(lit_u32(size)),
                tag: tag.as_str().into(),
            }
        };
        let wait = || Node::AsyncWait {
            tag: tag.as_str().into(),
        };
        let quiet = Ctx {
            no_return: true,
            ..ctx
        };
        let inner = self.nested(quiet, false);
        let between = |g: &mut Self| g.block_with(quiet, 2, |_| Vec::new());
        match self.rng.below(12) {
            0 | 1 => {
                // Start before an if/else, wait in both arms.
                let cond = self.divergent_cond(d);
                let then = self.block_with(inner, 2, |_| vec![wait()]);
                let otherwise = self.block_with(inner, 2, |_| vec![wait()]);
                vec![
                    start,
                    Node::If {
                        cond,
                        then,
                        otherwise,
                    },
                ]
            }
            2 | 3 => {
                // Start, then wait in `if c` or in a later `if !c`.
                let c = self.fresh("c");
                let cond = self.divergent_cond(d);
                let mut nodes = vec![
                    Node::Let {
                        name: c.as_str().into(),
                        value: cond,
                    },
                    start,
                    Node::If {
                        cond: var(&c),
                        then: vec![wait()],
                        otherwise: Vec::new(),
                    },
                ];
                nodes.extend(between(self));
                nodes.push(Node::If {
                    cond: un(UnOp::LogicalNot, var(&c)),
                    then: vec![wait()],
                    otherwise: Vec::new(),
                });
                nodes
            }
            4 | 5 => {
                // Start in a one-trip loop body, wait after the loop.
                let from = self.rng.below(3);
                let name = self.fresh("i");
                self.scopes.push(vec![Var {
                    name: name.clone(),
                    ty: Ty::U32,
                    assignable: false,
                }]);
                let body = self.block_with(inner, 2, |_| vec![start]);
                self.scopes.pop();
                let mut nodes = vec![Node::Loop {
                    var: name.as_str().into(),
                    from: lit_u32(from),
                    to: lit_u32(from + 1),
                    body,
                }];
                nodes.extend(between(self));
                nodes.push(wait());
                nodes
            }
            6 | 7 => {
                // Start in a block, wait after it, or start before a block, wait in it.
                let inner = Ctx {
                    depth: ctx.depth + 1,
                    top_level: false,
                    ..quiet
                };
                if self.rng.chance(50) {
                    let body = self.block_with(inner, 2, |_| vec![start]);
                    let mut nodes = vec![Node::Block(body)];
                    nodes.extend(between(self));
                    nodes.push(wait());
                    nodes
                } else {
                    let body = self.block_with(inner, 2, |_| vec![wait()]);
                    vec![start, Node::Block(body)]
                }
            }
            8..=10 => {
                // Start in `if c`, wait in a later `if c`.
                let c = self.fresh("c");
                let cond = self.divergent_cond(d);
                let then = self.block_with(inner, 1, |_| vec![start]);
                let mut nodes = vec![
                    Node::Let {
                        name: c.as_str().into(),
                        value: cond,
                    },
                    Node::If {
                        cond: var(&c),
                        then,
                        otherwise: Vec::new(),
                    },
                ];
                nodes.extend(between(self));
                nodes.push(Node::If {
                    cond: var(&c),
                    then: vec![wait()],
                    otherwise: Vec::new(),
                });
                nodes
            }
            _ => {
                // Wait only where `c` holds: the other invocations end with the copy
                // pending, a run-time error in the reference.
                let cond = self.divergent_cond(d);
                vec![
                    start,
                    Node::If {
                        cond,
                        then: vec![wait()],
                        otherwise: Vec::new(),
                    },
                ]
            }
        }
    }

    fn shared_phase(&mut self) -> Vec<Node> {
        let shared = self.bufs_where(|b| b.role == Role::Shared);
        let b = *self.rng.pick(&shared);
        let name = self.bufs[b].name.clone();
        let element = self.bufs[b].element.clone();
        let count = self.bufs[b].count;
        let mut nodes = Vec::new();
        let index = if self.rng.chance(85) {
            var("lid")
        } else {
            let c = self.cond(1);
            select(c, var("lid"), lit_u32(count + self.rng.below(4)))
        };
        let value = self.store_value(&element);
        nodes.push(Node::Store {
            buffer: name.as_str().into(),
            index,
            value,
        });
        nodes.push(Node::Barrier {
            ordering: *self.rng.pick(BARRIER_ORDERINGS),
        });
        let threads = self.threads;
        for _ in 0..self.rng.range(1, 3) {
            let index = match self.rng.below(6) {
                0 | 1 => bin(
                    BinOp::Mod,
                    bin(BinOp::Add, var("lid"), lit_u32(self.rng.range(1, 4))),
                    lit_u32(threads),
                ),
                2 => bin(BinOp::Sub, lit_u32(threads - 1), var("lid")),
                3 => lit_u32(self.rng.below(count + 2)),
                4 => var("lid"),
                _ => self.expr(Ty::U32, 1),
            };
            let ty = match element {
                DataType::I32 => Ty::I32,
                DataType::F32 => Ty::F32,
                _ => Ty::U32,
            };
            if let Some(value) = self.load_as(ty, b, index) {
                let v = self.fresh("s");
                self.declare(v.clone(), ty, true);
                nodes.push(Node::Let {
                    name: v.as_str().into(),
                    value,
                });
            }
        }
        nodes.push(Node::Barrier {
            ordering: *self.rng.pick(BARRIER_ORDERINGS),
        });
        nodes
    }
}

fn can_load_as(ty: Ty, element: &DataType) -> bool {
    matches!(
        (ty, element),
        (Ty::U32, DataType::U32)
            | (Ty::I32, DataType::I32)
            | (Ty::F32, DataType::F32)
            | (Ty::U32, DataType::Bool)
            | (Ty::Bool, DataType::Bool)
            | (
                Ty::U32,
                DataType::U8 | DataType::U16 | DataType::I8 | DataType::I16
            )
            | (Ty::I32, DataType::I8 | DataType::I16 | DataType::I64)
            | (Ty::U32, DataType::U64 | DataType::I64)
            | (
                Ty::Bool,
                DataType::U64 | DataType::I64 | DataType::U8 | DataType::I16
            )
    )
}

// ------------------------------------------------------------------ programs

fn draft(rng: &mut Rng, cfg: &GenConfig, seed: u64) -> FuzzCase {
    let f = &cfg.features;
    let elementwise = !cfg.replicated && rng.chance(25);
    let replicated = cfg.replicated;
    let workgroup = *rng.pick(&f.workgroups);
    let workgroup = if elementwise {
        [workgroup[0] * workgroup[1] * workgroup[2], 1, 1]
    } else {
        workgroup
    };
    let threads: u32 = workgroup.iter().product();
    let mut bufs = Vec::new();
    let max = cfg.max_count;
    for i in 0..rng.range(1, 3) {
        let element = rng.pick(&f.input_elements).clone();
        let (count, len) = match rng.below(10) {
            0 => (0, pick_count(rng, max)),
            1 => {
                let c = pick_count(rng, max);
                (c, c + rng.range(1, 9))
            }
            _ => {
                let c = pick_count(rng, max);
                (c, c)
            }
        };
        bufs.push(GBuf {
            name: format!("in{i}"),
            element,
            role: Role::Input,
            count,
            len,
            uniform: rng.chance(10),
            atomic: false,
        });
    }
    let k_choices: &[u32] = if elementwise {
        &[1]
    } else {
        &[1, 1, 1, 1, 2, 2, 3, 4]
    };
    for i in 0..rng.range(0, 2) {
        let element = rng.pick(&f.output_elements).clone();
        let count = pick_count(rng, max);
        let len = if rng.chance(8) {
            count + rng.range(1, 5)
        } else {
            count
        };
        bufs.push(GBuf {
            name: format!("rw{i}"),
            element,
            role: Role::InOut {
                k: *rng.pick(k_choices),
            },
            count,
            len,
            uniform: false,
            atomic: false,
        });
    }
    let want_output = rng.chance(70) || !bufs.iter().any(|b| b.returned());
    if want_output && rng.chance(97) {
        let element = rng.pick(&f.output_elements).clone();
        let count = pick_count(rng, max);
        bufs.push(GBuf {
            name: "out".into(),
            element,
            role: Role::Output {
                k: *rng.pick(k_choices),
            },
            count,
            len: count,
            uniform: false,
            atomic: false,
        });
    }
    // A replicated program's lanes stay in step only without atomics, unless each
    // workgroup is one invocation.
    let atomics = !elementwise && (!replicated || threads == 1);
    if atomics && !f.counter_atomics.is_empty() && rng.chance(25) {
        for i in 0..rng.range(1, 2) {
            let count = rng.range(1, 4);
            bufs.push(GBuf {
                name: format!("cnt{i}"),
                element: DataType::U32,
                role: Role::Counter(*rng.pick(&f.counter_atomics)),
                count,
                len: count,
                uniform: false,
                atomic: true,
            });
        }
    }
    if !elementwise && !replicated && !f.shared_elements.is_empty() && rng.chance(30) {
        for i in 0..rng.range(1, 2) {
            let count = match rng.below(5) {
                0 => 1,
                1 => threads.saturating_sub(1).max(1),
                2 => threads + rng.range(1, 4),
                _ => threads,
            };
            bufs.push(GBuf {
                name: format!("sh{i}"),
                element: rng.pick(&f.shared_elements).clone(),
                role: Role::Shared,
                count,
                len: count,
                uniform: false,
                atomic: false,
            });
        }
    }
    if f.bytes_buffers && rng.chance(f.bytes_chance) {
        let count = pick_count(rng, max);
        let (count, len) = if rng.chance(20) {
            (0, count)
        } else {
            (count, count)
        };
        bufs.push(GBuf {
            name: "bsrc".into(),
            element: DataType::Bytes,
            role: Role::BytesSource,
            count,
            len,
            uniform: false,
            atomic: false,
        });
        if rng.chance(70) {
            let count = pick_count(rng, max);
            bufs.push(GBuf {
                name: "bmirror".into(),
                element: DataType::Bytes,
                role: Role::BytesMirror,
                count,
                len: count,
                uniform: false,
                atomic: false,
            });
        }
    }
    let two_typed = f
        .statements
        .iter()
        .any(|(s, w)| *s == Stmt::SubgroupTwoTyped && *w > 0);
    if two_typed && rng.chance(50) {
        let count = pick_count(rng, max);
        bufs.push(GBuf {
            name: "fd".into(),
            element: DataType::F64,
            role: Role::WideFloats,
            count,
            len: count,
            uniform: false,
            atomic: false,
        });
    }
    let mut raw_parity = false;
    if !f.raw_elements.is_empty() && rng.chance(f.raw_chance) {
        raw_parity = rng.chance(40);
        let element = rng.pick(&f.raw_elements).clone();
        for (name, role) in [("rsrc", Role::RawSource), ("rmirror", Role::RawMirror)] {
            let count = pick_count(rng, max);
            bufs.push(GBuf {
                name: name.into(),
                element: element.clone(),
                role,
                count,
                len: count,
                uniform: false,
                atomic: false,
            });
        }
    }
    // A program holds one family of not-yet-lowered constructs (or, a quarter of the
    // time, all of them), so that the emitter's rejection of a program can be put down
    // to the construct it holds.
    let unlowered = match f.unlowered_buffers {
        false => 0,
        true => [
            UNLOWERED_SUBGROUPS,
            UNLOWERED_BYTES,
            UNLOWERED_ASYNC,
            UNLOWERED_SUBGROUPS | UNLOWERED_BYTES | UNLOWERED_ASYNC,
        ][rng.below(4) as usize],
    };
    let all = unlowered.count_ones() > 1;
    if unlowered & UNLOWERED_BYTES != 0 {
        if rng.chance(if all { 35 } else { 50 }) {
            let count = pick_count(rng, max);
            bufs.push(GBuf {
                name: "bio".into(),
                element: DataType::Bytes,
                role: Role::BytesWritable,
                count,
                len: count,
                uniform: false,
                atomic: false,
            });
        }
        // Workgroup memory needs the full grid (like `Role::Shared`), so not in
        // elementwise or replicated programs.
        if !elementwise && !replicated && rng.chance(if all { 20 } else { 35 }) {
            let count = match rng.below(4) {
                0 => threads * 4 - rng.below(4).min(threads * 4 - 1),
                _ => threads * 4,
            };
            bufs.push(GBuf {
                name: "shb".into(),
                element: DataType::Bytes,
                role: Role::SharedBytes,
                count,
                len: count,
                uniform: false,
                atomic: false,
            });
        }
    }
    if unlowered & UNLOWERED_ASYNC != 0 && (!all || rng.chance(50)) {
        let count = pick_count(rng, max).max(2);
        bufs.push(GBuf {
            name: "asrc".into(),
            element: DataType::U32,
            role: Role::AsyncSource,
            count,
            len: count,
            uniform: false,
            atomic: false,
        });
        let count = pick_count(rng, max).max(2);
        bufs.push(GBuf {
            name: "adst".into(),
            element: DataType::U32,
            role: Role::AsyncDest,
            count,
            len: count,
            uniform: false,
            atomic: false,
        });
    }
    for b in &mut bufs {
        if atomics && b.own_k().is_some() && b.element == DataType::U32 && !f.own_atomics.is_empty()
        {
            b.atomic = rng.chance(40);
        }
    }
    rng.shuffle(&mut bufs);

    let mut gen = Gen {
        rng,
        cfg,
        bufs,
        scopes: vec![vec![Var {
            name: "lin".into(),
            ty: Ty::U32,
            assignable: false,
        }]],
        next_name: 0,
        budget: 0,
        threads,
        elementwise,
        literal_leaves: false,
        unlowered,
        raw_parity,
        in_nested_operand: false,
    };
    gen.budget = gen.rng.range(3, cfg.max_statements) as i32;
    let top = Ctx {
        uniform: true,
        depth: 0,
        trip: 1,
        top_level: true,
        no_return: false,
    };
    let mut body = Vec::new();
    while gen.budget > 0 {
        body.extend(gen.block(top, 8));
    }
    let bufs = gen.bufs;

    // Declarations, with shuffled bindings.
    let storage = bufs.iter().filter(|b| !b.is_shared()).count() as u32;
    let mut bindings: Vec<u32> = (0..storage).collect();
    rng.shuffle(&mut bindings);
    let mut next_binding = bindings.into_iter();
    let decls: Vec<BufferDecl> = bufs
        .iter()
        .map(|b| match b.role {
            Role::Shared => BufferDecl::workgroup(&b.name, b.count, b.element.clone()),
            // Bytes loads are views of the rest of the buffer (as for the storage bytes
            // buffers), and saved cases restore the flag on every bytes buffer.
            Role::SharedBytes => BufferDecl::workgroup(&b.name, b.count, b.element.clone())
                .with_bytes_extraction(true),
            _ => {
                let binding = next_binding.next().unwrap_or(0);
                let decl = match b.role {
                    Role::Input if b.uniform => {
                        BufferDecl::uniform(&b.name, binding, b.element.clone())
                    }
                    Role::Input
                    | Role::BytesSource
                    | Role::AsyncSource
                    | Role::RawSource
                    | Role::WideFloats => BufferDecl::read(&b.name, binding, b.element.clone()),
                    Role::Output { .. } | Role::BytesMirror => {
                        BufferDecl::output(&b.name, binding, b.element.clone())
                    }
                    _ => BufferDecl::read_write(&b.name, binding, b.element.clone()),
                };
                decl.with_count(b.count)
                    .with_bytes_extraction(b.element == DataType::Bytes)
            }
        })
        .collect();

    let inputs: Vec<Vec<u8>> = bufs
        .iter()
        .filter(|b| b.takes_input())
        .map(|b| values::buffer_bytes(rng, &b.element, b.len as usize))
        .collect();

    // Sometimes a `dispatch_elements` floor launches more invocations than the buffers
    // ask for (`reference_eval_with_dispatch` on the reference side).
    let mut config = DispatchConfig::default();
    if rng.chance(6) {
        config.dispatch_elements = Some(rng.range(1, 300));
    }
    // The grid the reference launches, from the final program's shape.
    let draft = Program::wrapped(decls.clone(), workgroup, body.clone());
    let grid = reference_grid(&draft, &inputs, config.dispatch_elements.unwrap_or(0));
    let extent = [
        grid[0] * workgroup[0],
        grid[1] * workgroup[1],
        grid[2] * workgroup[2],
    ];
    let gid = |axis| Expr::InvocationId { axis };
    let mut lin = gid(0);
    if replicated {
        lin = lit_u32(rng.below(4));
    } else if !elementwise && (extent[1] > 1 || rng.chance(20)) {
        lin = bin(BinOp::Add, lin, bin(BinOp::Mul, gid(1), lit_u32(extent[0])));
    }
    if !elementwise && !replicated && (extent[2] > 1 || rng.chance(10)) {
        lin = bin(
            BinOp::Add,
            lin,
            bin(BinOp::Mul, gid(2), lit_u32(extent[0] * extent[1])),
        );
    }
    let lid_expr = bin(
        BinOp::Add,
        Expr::LocalId { axis: 0 },
        bin(
            BinOp::Add,
            bin(BinOp::Mul, Expr::LocalId { axis: 1 }, lit_u32(workgroup[0])),
            bin(
                BinOp::Mul,
                Expr::LocalId { axis: 2 },
                lit_u32(workgroup[0] * workgroup[1]),
            ),
        ),
    );
    let mut entry = vec![Node::Let {
        name: "lin".into(),
        value: lin,
    }];
    if bufs.iter().any(GBuf::is_shared) {
        entry.push(Node::Let {
            name: "lid".into(),
            value: lid_expr,
        });
    }
    entry.extend(body);
    FuzzCase {
        seed,
        program: Program::wrapped(decls, workgroup, entry),
        inputs,
        config,
    }
}

/// The grid `vyre-reference` launches for `program` with `inputs` and a
/// `dispatch_elements` floor (its `run_hashmap_reference` rule; the backend's plan
/// computes the same).
pub fn reference_grid(program: &Program, inputs: &[Vec<u8>], floor: u32) -> [u32; 3] {
    let mut next_input = 0usize;
    let (mut max_returned, mut max_other) = (0u32, 1u32);
    let mut has_returned = false;
    let mut has_shared = false;
    for decl in program.buffers() {
        if decl.access() == BufferAccess::Workgroup {
            has_shared = true;
            continue;
        }
        let element = decl.element();
        let bytes = if decl.is_backend_allocated_output() {
            values::declared_bytes(&element, decl.count())
        } else {
            let len = inputs.get(next_input).map_or(0, Vec::len);
            next_input += 1;
            len
        };
        let elements = values::element_count(&element, bytes);
        if decl.is_backend_allocated_output() || decl.access() == BufferAccess::ReadWrite {
            has_returned = true;
            max_returned = max_returned.max(elements);
        } else {
            max_other = max_other.max(elements);
        }
    }
    let full_span = has_shared || program.stats().atomic_op_count > 0;
    let elements = max_returned
        .max(1)
        .max(if !has_returned || full_span {
            max_other
        } else {
            1
        })
        .max(floor);
    let wg = program.workgroup_size();
    let per_group = wg.iter().product::<u32>().max(1);
    let total = elements.div_ceil(per_group).max(1);
    let active: Vec<usize> = (0..3).filter(|&a| wg[a] > 1).collect();
    let mut grid = [1u32; 3];
    if active.is_empty() {
        grid[0] = total;
    } else {
        let base = f64::from(total).powf(1.0 / active.len() as f64).ceil() as u32;
        for a in active {
            grid[a] = base.max(1);
        }
    }
    grid
}

/// The element types of `Stmt::RawCopy` buffers: each loads as raw bytes in the reference.
/// Not `Vec` or `DeviceMesh` elements: vyre's wire format, which saved cases are written
/// in, cannot hold them (the semantic cases cover them).
fn raw_element_types() -> Vec<DataType> {
    use vyre_spec::{QuantizationScale, QuantizationZeroPoint};
    vec![
        DataType::F8E4M3,
        DataType::F8E5M2,
        DataType::I4,
        DataType::NF4,
        DataType::FP4,
        DataType::Quantized {
            storage: Box::new(DataType::I4),
            scale: QuantizationScale::PerGroup { group_size: 32 },
            zero_point: QuantizationZeroPoint::PerGroup { group_size: 32 },
        },
        DataType::Handle(vyre_spec::TypeId(7)),
        DataType::Array { element_size: 2 },
        // Wider than registers hold: every load a view of 300 zero bytes at the null
        // address (`kind::wide_element`).
        DataType::Array { element_size: 300 },
    ]
}

/// The read-only bytes buffers when there are any, else every bytes buffer (a view of a
/// writable one bound by a `Let` and read is a refusal of its own).
fn readable_or(readable: &[usize], any: &[usize]) -> Vec<usize> {
    match readable.is_empty() {
        true => any.to_vec(),
        false => readable.to_vec(),
    }
}
