//! A tiny typed builder for the libm routines, printed as PTX blocks inlined at each call
//! site ([`Func::inline`]).
//!
//! A routine is written as Rust calls that mirror the original source line by line, its
//! float expressions with the source's operators (`let z = f.eval(x * x);`, see [`E`]);
//! the builder records typed instructions on virtual registers and prints them as PTX. Every float instruction carries an explicit `.rn` (so ptxas
//! never contracts a multiply and an add into an fma) and none carries `.ftz` (the Rust
//! code runs with subnormals). In tests the same instruction list is executed by
//! [`super::interp`], so a port can be checked against `libm` without a GPU.

use std::fmt::Write as _;

pub(crate) use super::super::writer::Reg as R;
/// A register class (the PTX `.reg` type): the emitter's own.
pub(crate) use super::super::writer::RegClass as Class;
use super::super::writer::{fresh_reg, register_decls};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Reg(R),
    F32(u32),
    F64(u64),
    /// Integer immediate (two's complement in the instruction's width).
    Int(i64),
}

impl From<R> for Op {
    fn from(r: R) -> Self {
        Op::Reg(r)
    }
}

impl Op {
    /// The operand's class (`None` for an integer immediate, which takes the instruction's).
    pub(crate) fn class(self) -> Option<Class> {
        match self {
            Op::Reg(r) => Some(r.class),
            Op::F32(_) => Some(Class::F32),
            Op::F64(_) => Some(Class::F64),
            Op::Int(_) => None,
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Reg(r) => write!(f, "{r}"),
            Op::F32(bits) => write!(f, "0f{bits:08X}"),
            Op::F64(bits) => write!(f, "0d{bits:016X}"),
            Op::Int(v) if (0..10).contains(v) || *v < 0 => write!(f, "{v}"),
            Op::Int(v) => write!(f, "0x{v:X}"),
        }
    }
}

/// f32 immediate with the value of a Rust `f32` (literal parsing is correctly rounded in
/// both rustc and here, so `f32c(0.1)` has the bits of the libm constant `0.1f32`).
pub(crate) const fn f32c(v: f32) -> Op {
    Op::F32(v.to_bits())
}

pub(crate) const fn f64c(v: f64) -> Op {
    Op::F64(v.to_bits())
}

pub(crate) const fn int(v: i64) -> Op {
    Op::Int(v)
}

/// The symbol of the exact f32 division routine (the `division` module builds it): an f32
/// `/` in a port calls it, as `div.rn.f32` would cost a kernel ptxas's slow-path subroutine.
pub(crate) const EXACT_DIVISION: &str = "vyre_div_rn_f32";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl FOp {
    fn name(self) -> &'static str {
        match self {
            FOp::Add => "add",
            FOp::Sub => "sub",
            FOp::Mul => "mul",
            FOp::Div => "div",
        }
    }
}

/// A float expression over registers and immediates, written with `+ - * /` as in the
/// Rust source; [`Func::eval`] emits it operation by operation in Rust's evaluation order
/// (left operand, right operand, then the operation).
#[derive(Debug, Clone)]
pub(crate) enum E {
    Leaf(Op),
    Bin(FOp, Box<E>, Box<E>),
}

impl<T: Into<Op>> From<T> for E {
    fn from(leaf: T) -> Self {
        E::Leaf(leaf.into())
    }
}

/// `a op b` building an [`E`], for registers, immediates and expressions on the left.
macro_rules! expr_ops {
    ($($trait:ident $method:ident $op:ident;)*) => {$(
        expr_ops!(@impl E, $trait, $method, $op);
        expr_ops!(@impl R, $trait, $method, $op);
        expr_ops!(@impl Op, $trait, $method, $op);
    )*};
    (@impl $lhs:ty, $trait:ident, $method:ident, $op:ident) => {
        impl<B: Into<E>> std::ops::$trait<B> for $lhs {
            type Output = E;
            fn $method(self, b: B) -> E {
                E::Bin(FOp::$op, Box::new(self.into()), Box::new(b.into()))
            }
        }
    };
}

expr_ops! {
    Add add Add;
    Sub sub Sub;
    Mul mul Mul;
    Div div Div;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IOp {
    Add,
    Sub,
    Mul,
    DivS,
    And,
    Or,
    Shl,
    ShrU,
    ShrS,
    MaxU,
}

impl IOp {
    /// The opcode and its type letter (`s`igned, `b`its or `u`nsigned; the width follows).
    fn ptx(self) -> (&'static str, char) {
        match self {
            IOp::Add => ("add", 's'),
            IOp::Sub => ("sub", 's'),
            IOp::Mul => ("mul.lo", 's'),
            IOp::DivS => ("div", 's'),
            IOp::And => ("and", 'b'),
            IOp::Or => ("or", 'b'),
            IOp::Shl => ("shl", 'b'),
            IOp::ShrU => ("shr", 'u'),
            IOp::ShrS => ("shr", 's'),
            IOp::MaxU => ("max", 'u'),
        }
    }
}

/// Conversions `ToFrom`, each the exact PTX counterpart of a Rust `as` (to an integer:
/// toward zero, saturating, NaN -> 0; to f32: nearest even, subnormals kept), and
/// `f64::floor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cvt {
    F64F32,
    F32F64,
    S32F32,
    S32F64,
    F32S32,
    F64S32,
    FloorF64,
    U64U32,
}

impl Cvt {
    /// The PTX instruction, and the classes it converts from and to.
    fn spec(self) -> (&'static str, Class, Class) {
        match self {
            Cvt::F64F32 => ("cvt.f64.f32", Class::F32, Class::F64),
            Cvt::F32F64 => ("cvt.rn.f32.f64", Class::F64, Class::F32),
            Cvt::S32F32 => ("cvt.rzi.s32.f32", Class::F32, Class::B32),
            Cvt::S32F64 => ("cvt.rzi.s32.f64", Class::F64, Class::B32),
            Cvt::F32S32 => ("cvt.rn.f32.s32", Class::B32, Class::F32),
            Cvt::F64S32 => ("cvt.rn.f64.s32", Class::B32, Class::F64),
            Cvt::FloorF64 => ("cvt.rmi.f64.f64", Class::F64, Class::F64),
            Cvt::U64U32 => ("cvt.u64.u32", Class::B32, Class::B64),
        }
    }
}

/// Comparison. Float comparisons are ordered (false on NaN) except `Ne`, which is true on
/// NaN like Rust's `!=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Cmp {
    /// The `setp` condition (`!=` of floats is unordered).
    fn name(self, ty: CmpTy) -> &'static str {
        match self {
            Cmp::Lt => "lt",
            Cmp::Le => "le",
            Cmp::Gt => "gt",
            Cmp::Ge => "ge",
            Cmp::Eq => "eq",
            Cmp::Ne if ty == CmpTy::Float => "neu",
            Cmp::Ne => "ne",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpTy {
    Float,
    Signed,
    Unsigned,
}

/// A constant table, emitted as a module-level `.const` array.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) name: &'static str,
    /// Element class: `B32`/`F32` (4 bytes) or `F64` (8 bytes).
    pub(crate) class: Class,
    /// Element bits (the low 32 bits for 4-byte elements).
    pub(crate) data: &'static [u64],
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Local {
    pub(crate) name: &'static str,
    pub(crate) class: Class,
    pub(crate) len: u32,
}

/// The array a load or store addresses: a `.const` table or one of the function's
/// `.local` arrays (the only ones stored to).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mem {
    Table(&'static Table),
    Local(usize),
}

impl From<&'static Table> for Mem {
    fn from(table: &'static Table) -> Self {
        Mem::Table(table)
    }
}

/// `mem[idx]`, with the two registers the address arithmetic of an index register needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addr {
    pub(crate) mem: Mem,
    pub(crate) idx: Op,
    tmp: [R; 2],
}

/// A one-operand float instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UOp {
    /// Correctly rounded (`sqrt.rn`; SSE `sqrtss`/`sqrtsd`).
    Sqrt,
    Neg,
    Abs,
    /// The hardware's reciprocal estimate (`rcp.approx.ftz`): within an ulp of 1/a (f32)
    /// or from a's high word (f64), exact for ±0, ±inf and NaN, subnormals flushed; the
    /// divisions refine it ([`Func::div_in_range`] and the exact division).
    RcpApprox,
}

impl UOp {
    fn name(self) -> &'static str {
        match self {
            UOp::Sqrt => "sqrt.rn",
            UOp::Neg => "neg",
            UOp::Abs => "abs",
            UOp::RcpApprox => "rcp.approx.ftz",
        }
    }
}

/// One instruction on virtual registers: `d` the destination, `a`/`b` the operands.
#[derive(Debug, Clone)]
pub(crate) enum Inst {
    /// `d = a op b` (`.rn`).
    F(FOp, R, Op, Op),
    /// `d = op(a)`.
    Unary(UOp, R, Op),
    /// `d = a * b + c`, rounded once (`fma.rn`).
    Fma(R, Op, Op, Op),
    /// `d = a op b` on integers of d's width.
    I(IOp, R, Op, Op),
    /// `d = a as _`.
    Cvt(Cvt, R, R),
    /// `d = a`, or a's bits when the classes differ.
    Mov(R, Op),
    /// `d = a cmp b`, the operands compared as `ty`.
    Setp(Cmp, CmpTy, R, Op, Op),
    /// `d = if p { a } else { b }`: `(d, a, b, p)`.
    Selp(R, Op, Op, R),
    /// `d = p && q` on predicates.
    AndPred(R, R, R),
    /// Branch to a label, only when the predicate is `.1` (true) or `.0` (false) if given.
    Bra(u32, Option<(R, bool)>),
    Label(u32),
    Ret(Vec<R>),
    /// `rets = callee(args)`: `(callee, args, rets)`.
    Call(&'static str, Vec<R>, Vec<R>),
    /// `d = at`.
    Ld(R, Addr),
    /// `at = v`: `(at, v)`.
    St(Addr, R),
}

/// `name(a, b) -> R` builder methods, each `self.via(op, a, b)`.
macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $via:ident($op:expr);)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name(&mut self, a: impl Into<Op>, b: impl Into<Op>) -> R {
            self.$via($op, a, b)
        }
    )*};
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Func {
    pub(crate) name: &'static str,
    pub(crate) params: Vec<R>,
    pub(crate) rets: Vec<Class>,
    pub(crate) body: Vec<Inst>,
    pub(crate) locals: Vec<Local>,
    pub(crate) counts: [u32; 5],
    labels: u32,
}

/// A branch target inside one function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Label(u32);

impl Func {
    pub(crate) fn new(name: &'static str, params: &[Class], rets: &[Class]) -> Self {
        let rets = rets.to_vec();
        let mut f = Func {
            name,
            rets,
            ..Func::default()
        };
        f.params = params.iter().map(|&c| f.reg(c)).collect();
        f
    }

    pub(crate) fn reg(&mut self, class: Class) -> R {
        fresh_reg(&mut self.counts, class)
    }

    fn float_class(a: Op, b: Op) -> Class {
        let class = a
            .class()
            .or(b.class())
            .expect("float op needs a typed operand");
        assert!(class.is_float(), "float op on {class:?}");
        if let Some(other) = b.class() {
            assert_eq!(class, other, "mixed float widths");
        }
        class
    }

    /// `a` in a register when `b` is an immediate too (PTX wants one register operand).
    fn reg_operand(&mut self, a: Op, b: Op, class: Class) -> Op {
        match (a, b) {
            (Op::Reg(_), _) | (_, Op::Reg(_)) => a,
            _ => Op::Reg(self.copy(class, a)),
        }
    }

    fn fop(&mut self, op: FOp, a: Op, b: Op) -> R {
        let class = Self::float_class(a, b);
        if (op, class) == (FOp::Div, Class::F32) {
            // `div.rn.f32` is a slow-path subroutine in every kernel that uses it (see
            // the `division` module): the routine computes the same bits.
            let args = [a, b].map(|v| self.materialize(v, class));
            let d = self.reg(class);
            let callee = EXACT_DIVISION;
            self.body.push(Inst::Call(callee, args.to_vec(), vec![d]));
            return d;
        }
        let a = self.reg_operand(a, b, class);
        let d = self.reg(class);
        self.body.push(Inst::F(op, d, a, b));
        d
    }

    /// `a * b + c` rounded once.
    pub(crate) fn fma(&mut self, a: impl Into<Op>, b: impl Into<Op>, c: impl Into<Op>) -> R {
        let (a, b, c) = (a.into(), b.into(), c.into());
        let class = Self::float_class(a, b);
        let a = self.reg_operand(a, b, class);
        let d = self.reg(class);
        self.body.push(Inst::Fma(d, a, b, c));
        d
    }

    binary_ops! {
        iadd => iop(IOp::Add);
        isub => iop(IOp::Sub);
        imul => iop(IOp::Mul);
        /// Signed division, truncating (Rust `/` on `i32`; never by zero here).
        idiv_s => iop(IOp::DivS);
        and => iop(IOp::And);
        or => iop(IOp::Or);
        /// `a << b` (PTX clamps counts above the width; the ports only shift in range).
        shl => iop(IOp::Shl);
        shr_u => iop(IOp::ShrU);
        shr_s => iop(IOp::ShrS);
        max_u => iop(IOp::MaxU);
    }

    /// Emit `e` (see [`E`]); a register stands for itself.
    pub(crate) fn eval(&mut self, e: impl Into<E>) -> R {
        match self.operand(e.into()) {
            Op::Reg(r) => r,
            imm => panic!("{imm} is not computed"),
        }
    }

    /// `e` as an operand: an immediate, a register, or the register `e` is computed into.
    fn operand(&mut self, e: E) -> Op {
        match e {
            E::Leaf(op) => op,
            E::Bin(op, a, b) => {
                let a = self.operand(*a);
                let b = self.operand(*b);
                self.fop(op, a, b).into()
            }
        }
    }

    fn unary(&mut self, op: UOp, a: impl Into<Op>) -> R {
        let a = a.into();
        let d = self.reg(Self::float_class(a, a));
        self.body.push(Inst::Unary(op, d, a));
        d
    }

    pub(crate) fn sqrt(&mut self, a: impl Into<Op>) -> R {
        self.unary(UOp::Sqrt, a)
    }

    pub(crate) fn neg(&mut self, a: impl Into<Op>) -> R {
        self.unary(UOp::Neg, a)
    }

    pub(crate) fn abs(&mut self, a: impl Into<Op>) -> R {
        self.unary(UOp::Abs, a)
    }

    /// `a / b` on f32, correctly rounded, for operands a port knows to be in range: ptxas's
    /// own fast path of `div.rn.f32` (the reciprocal estimate refined by one Newton step,
    /// the quotient, one correction by the exact remainder) without the `FCHK` test and the
    /// slow-path subroutine ptxas adds for the rest. ptxas compiles that subroutine into
    /// every kernel with a `div.rn.f32` at all, and it costs the driver's JIT more than the
    /// routine around it (offline, silu 22.5 ms instead of 30.5 with neither division
    /// taking it; a trivial module 15.3).
    ///
    /// In range means what `FCHK` checks: `b` normal with 1/b normal (|b| below 2^126), `a`
    /// a normal of magnitude at least 2^-100 or +0 (so the remainder `a - b * q` is an exact
    /// f32), and the quotient within 2^±120; -0 divides to +0 here. Every use states its
    /// operands' range, and the exhaustive GPU sweep (`gpu_libm_sweep`, all 2^32 inputs of
    /// each port) checks the hardware's estimate there.
    pub(crate) fn div_in_range(&mut self, a: impl Into<E>, b: impl Into<E>) -> R {
        let a = self.operand(a.into());
        let b = self.eval(b);
        self.fast_quotient(a, b).1
    }

    /// ptxas's fast path of `div.rn.f32` for f32 `a / b`: y = 1/b's estimate refined once,
    /// q0 = a * y, then q0 corrected by the exact remainder; returns q0 (which
    /// the exact division tests) and the corrected quotient.
    pub(crate) fn fast_quotient(&mut self, a: Op, b: R) -> (R, R) {
        assert_eq!(
            (a.class(), b.class),
            (Some(Class::F32), Class::F32),
            "f32 division"
        );
        let estimate = self.rcp_approx(b);
        let minus_b = self.neg(b);
        let error = self.fma(minus_b, estimate, f32c(1.0));
        let y = self.fma(estimate, error, estimate);
        let q0 = self.eval(a * y);
        let remainder = self.fma(minus_b, q0, a);
        (q0, self.fma(y, remainder, q0))
    }

    pub(crate) fn rcp_approx(&mut self, a: impl Into<Op>) -> R {
        self.unary(UOp::RcpApprox, a)
    }

    fn iop(&mut self, op: IOp, a: impl Into<Op>, b: impl Into<Op>) -> R {
        let (a, b) = (a.into(), b.into());
        let class = a.class().or(b.class()).unwrap_or(Class::B32);
        assert!(
            matches!(class, Class::B32 | Class::B64),
            "int op on {class:?}"
        );
        let a = self.reg_operand(a, b, class);
        let d = self.reg(class);
        self.body.push(Inst::I(op, d, a, b));
        d
    }

    pub(crate) fn cvt(&mut self, op: Cvt, a: impl Into<E>) -> R {
        let a = self.eval(a);
        let (_, from, to) = op.spec();
        assert_eq!(a.class, from, "{op:?} of {a}");
        let d = self.reg(to);
        self.body.push(Inst::Cvt(op, d, a));
        d
    }

    /// `f32::to_bits` / `f64::to_bits` (and the reverse for integer registers).
    pub(crate) fn bits(&mut self, a: impl Into<E>) -> R {
        let a = self.eval(a);
        let class = match a.class {
            Class::F32 => Class::B32,
            Class::F64 => Class::B64,
            Class::B32 => Class::F32,
            Class::B64 => Class::F64,
            Class::Pred => panic!("bits of a predicate"),
        };
        let d = self.reg(class);
        self.body.push(Inst::Mov(d, a.into()));
        d
    }

    pub(crate) fn copy(&mut self, class: Class, a: impl Into<Op>) -> R {
        let d = self.reg(class);
        self.set(d, a.into());
        d
    }

    /// `d = a` (a mutable variable's update).
    pub(crate) fn set(&mut self, d: R, a: impl Into<E>) {
        let a = self.operand(a.into());
        if let Some(class) = a.class() {
            assert_eq!(class.bytes(), d.class.bytes(), "mov size mismatch");
        }
        self.body.push(Inst::Mov(d, a));
    }

    /// `d = value(self)`: a mutable variable updated to a freshly computed value.
    pub(crate) fn update(&mut self, d: R, value: impl FnOnce(&mut Self) -> R) {
        let v = value(self);
        self.set(d, v);
    }

    pub(crate) fn setp(&mut self, cmp: Cmp, ty: CmpTy, a: impl Into<Op>, b: impl Into<Op>) -> R {
        let (a, b) = (a.into(), b.into());
        let d = self.reg(Class::Pred);
        self.body.push(Inst::Setp(cmp, ty, d, a, b));
        d
    }

    /// Float comparison (`Ne` is unordered, the rest ordered, as in Rust).
    pub(crate) fn fcmp(&mut self, cmp: Cmp, a: impl Into<Op>, b: impl Into<Op>) -> R {
        self.setp(cmp, CmpTy::Float, a, b)
    }

    pub(crate) fn ucmp(&mut self, cmp: Cmp, a: impl Into<Op>, b: impl Into<Op>) -> R {
        self.setp(cmp, CmpTy::Unsigned, a, b)
    }

    pub(crate) fn scmp(&mut self, cmp: Cmp, a: impl Into<Op>, b: impl Into<Op>) -> R {
        self.setp(cmp, CmpTy::Signed, a, b)
    }

    pub(crate) fn selp(&mut self, p: R, a: impl Into<Op>, b: impl Into<Op>) -> R {
        let (a, b) = (a.into(), b.into());
        let class = a.class().or(b.class()).unwrap_or(Class::B32);
        let d = self.reg(class);
        self.body.push(Inst::Selp(d, a, b, p));
        d
    }

    /// `p && q`.
    pub(crate) fn and_pred(&mut self, p: R, q: R) -> R {
        let d = self.reg(Class::Pred);
        self.body.push(Inst::AndPred(d, p, q));
        d
    }

    pub(crate) fn negate_if(&mut self, p: R, v: R) -> R {
        let neg = self.neg(v);
        self.selp(p, neg, v)
    }

    /// A new label (placed with [`Func::place`]).
    pub(crate) fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels)
    }

    pub(crate) fn place(&mut self, l: Label) {
        self.body.push(Inst::Label(l.0));
    }

    pub(crate) fn bra(&mut self, l: Label) {
        self.body.push(Inst::Bra(l.0, None));
    }

    /// Branch to `l` when `p` is `value`.
    pub(crate) fn bra_if(&mut self, p: R, value: bool, l: Label) {
        self.body.push(Inst::Bra(l.0, Some((p, value))));
    }

    pub(crate) fn when(&mut self, p: R, body: impl FnOnce(&mut Self)) {
        let skip = self.label();
        self.bra_if(p, false, skip);
        body(self);
        self.place(skip);
    }

    pub(crate) fn if_else(
        &mut self,
        p: R,
        then: impl FnOnce(&mut Self),
        otherwise: impl FnOnce(&mut Self),
    ) {
        let other = self.label();
        let done = self.label();
        self.bra_if(p, false, other);
        then(self);
        self.bra(done);
        self.place(other);
        otherwise(self);
        self.place(done);
    }

    /// `loop { if exit { break } body }`, `exit` evaluated at the top of every
    /// iteration; `body` gets the loop's exit label for a `break` of its own.
    pub(crate) fn until(
        &mut self,
        exit: impl FnOnce(&mut Self) -> R,
        body: impl FnOnce(&mut Self, Label),
    ) {
        let top = self.label();
        let done = self.label();
        self.place(top);
        let end = exit(self);
        self.bra_if(end, true, done);
        body(self, done);
        self.bra(top);
        self.place(done);
    }

    /// `for i in from..end` (`cmp` `Ge`), `from..=end` (`Gt`) or `(end..=from).rev()`
    /// (`Lt`) on the signed integer `i`; `body` gets the loop's exit label.
    pub(crate) fn count(
        &mut self,
        i: R,
        from: impl Into<Op>,
        (cmp, end): (Cmp, Op),
        body: impl FnOnce(&mut Self, Label),
    ) {
        self.set(i, from.into());
        self.until(
            |f| f.scmp(cmp, i, end),
            |f, done| {
                body(f, done);
                f.bump(i, if cmp == Cmp::Lt { -1 } else { 1 });
            },
        );
    }

    /// `r += by` on an integer variable (a `sub` for a negative `by`).
    pub(crate) fn bump(&mut self, r: R, by: i64) {
        let v = if by < 0 {
            self.isub(r, int(-by))
        } else {
            self.iadd(r, int(by))
        };
        self.set(r, v);
    }

    fn materialize(&mut self, v: Op, class: Class) -> R {
        match v {
            Op::Reg(r) => {
                assert_eq!(r.class, class, "value of the wrong class");
                r
            }
            imm => self.copy(class, imm),
        }
    }

    /// `return vals` (one value per declared return).
    pub(crate) fn ret(&mut self, vals: &[Op]) {
        assert_eq!(vals.len(), self.rets.len(), "{}: return arity", self.name);
        let regs = vals
            .iter()
            .zip(self.rets.clone())
            .map(|(&v, class)| self.materialize(v, class))
            .collect();
        self.body.push(Inst::Ret(regs));
    }

    pub(crate) fn ret1(&mut self, v: impl Into<E>) {
        let v = self.operand(v.into());
        self.ret(&[v]);
    }

    pub(crate) fn call(&mut self, callee: &Func, args: &[Op]) -> Vec<R> {
        assert_eq!(args.len(), callee.params.len(), "{}: arity", callee.name);
        let args = args
            .iter()
            .zip(callee.params.iter().map(|p| p.class))
            .map(|(&v, class)| self.materialize(v, class))
            .collect();
        let rets: Vec<R> = callee.rets.iter().map(|&c| self.reg(c)).collect();
        self.body.push(Inst::Call(callee.name, args, rets.clone()));
        rets
    }

    /// The class of `mem`'s elements.
    fn class_of(&self, mem: Mem) -> Class {
        match mem {
            Mem::Table(table) => table.class,
            Mem::Local(arr) => self.locals[arr].class,
        }
    }

    fn addr(&mut self, mem: Mem, idx: impl Into<Op>) -> Addr {
        let tmp = [self.reg(Class::B64), self.reg(Class::B64)];
        let idx = idx.into();
        Addr { mem, idx, tmp }
    }

    /// `mem[idx]` (idx: a non-negative `B32` value or an immediate).
    pub(crate) fn ld(&mut self, mem: impl Into<Mem>, idx: impl Into<Op>) -> R {
        let mem = mem.into();
        let d = self.reg(self.class_of(mem));
        let at = self.addr(mem, idx);
        self.body.push(Inst::Ld(d, at));
        d
    }

    /// A `.local` array of `len` elements.
    pub(crate) fn local(&mut self, name: &'static str, class: Class, len: u32) -> Mem {
        self.locals.push(Local { name, class, len });
        Mem::Local(self.locals.len() - 1)
    }

    /// `local[idx] = v`.
    pub(crate) fn st(&mut self, local: Mem, idx: impl Into<Op>, v: impl Into<E>) {
        let v = self.operand(v.into());
        let v = self.materialize(v, self.class_of(local));
        let at = self.addr(local, idx);
        self.body.push(Inst::St(at, v));
    }

    /// Whether the body calls the routine `name`.
    pub(crate) fn calls(&self, name: &str) -> bool {
        self.body
            .iter()
            .any(|inst| matches!(inst, Inst::Call(callee, ..) if *callee == name))
    }

    /// The `.const` tables the body reads, in order, with repeats.
    pub(crate) fn tables(&self) -> impl Iterator<Item = &'static Table> + '_ {
        self.body.iter().filter_map(|inst| match inst {
            Inst::Ld(_, at) => match at.mem {
                Mem::Table(table) => Some(table),
                Mem::Local(_) => None,
            },
            _ => None,
        })
    }

    /// The routine inlined at a call site: a PTX block that moves `args` (registers of
    /// the enclosing code) in, runs the body and moves the results into `rets`. The block
    /// declares the routine's own registers, which shadow the enclosing ones of the same
    /// names, so values cross the boundary through `%lmx` registers of an outer block. Its
    /// labels and `.local` arrays take a tag unique in the kernel (`tags` counts them);
    /// the routines it calls are inlined the same way (found by name in `routines`).
    pub(crate) fn inline(
        &self,
        args: &[String],
        rets: &[String],
        routines: &[Func],
        tags: &mut u32,
    ) -> String {
        assert_eq!(args.len(), self.params.len(), "{}: arity", self.name);
        assert_eq!(rets.len(), self.rets.len(), "{}: return arity", self.name);
        *tags += 1;
        let tag = *tags;
        let classes = self.params.iter().map(|p| p.class).chain(self.rets.clone());
        let mut out = format!("\t// {} inlined\n\t{{\n", self.name);
        for (i, class) in classes.enumerate() {
            let _ = writeln!(out, "\t.reg .{} %lmx{i};", class.ty());
        }
        for (i, (p, a)) in self.params.iter().zip(args).enumerate() {
            let _ = writeln!(out, "\tmov.{} %lmx{i}, {a};", p.class.ty());
        }
        out.push_str("\t{\n");
        out.push_str(&register_decls(&self.counts));
        for local in &self.locals {
            let _ = writeln!(
                out,
                "\t.local .align 8 .b8 {}_{tag}[{}];",
                local.name,
                local.len * local.class.bytes()
            );
        }
        for (i, p) in self.params.iter().enumerate() {
            let _ = writeln!(out, "\tmov.{} {p}, %lmx{i};", p.class.ty());
        }
        let mut site = Site {
            tag,
            first_ret: self.params.len(),
            routines,
            tags,
        };
        for inst in &self.body {
            self.print(&mut out, inst, &mut site);
        }
        let _ = writeln!(out, "$Lv{tag}_end:\n\t}}");
        for (i, (class, r)) in self.rets.iter().zip(rets).enumerate() {
            let _ = writeln!(
                out,
                "\tmov.{} {r}, %lmx{};",
                class.ty(),
                self.params.len() + i
            );
        }
        out.push_str("\t}\n");
        out
    }

    /// Print one instruction (with the address arithmetic a memory access needs).
    fn print(&self, out: &mut String, inst: &Inst, site: &mut Site<'_>) {
        let line = match *inst {
            Inst::F(op, d, a, b) => format!("{}.rn.{} {d}, {a}, {b};", op.name(), d.class.ty()),
            Inst::Unary(op, d, a) => format!("{}.{} {d}, {a};", op.name(), d.class.ty()),
            Inst::Fma(d, a, b, c) => format!("fma.rn.{} {d}, {a}, {b}, {c};", d.class.ty()),
            Inst::I(op, d, a, b) => {
                let (name, ty) = op.ptx();
                format!("{name}.{ty}{} {d}, {a}, {b};", 8 * d.class.bytes())
            }
            Inst::Cvt(op, d, a) => format!("{} {d}, {a};", op.spec().0),
            Inst::Mov(d, a) => {
                // A reinterpretation between classes moves untyped bits.
                let ty = match a {
                    Op::Reg(r) if r.class != d.class => format!("b{}", 8 * d.class.bytes()),
                    _ => d.class.ty().to_string(),
                };
                format!("mov.{ty} {d}, {a};")
            }
            Inst::Setp(cmp, ty, d, a, b) => {
                let class = a.class().or(b.class()).unwrap_or(Class::B32);
                let t = match ty {
                    CmpTy::Float => class.ty().to_string(),
                    CmpTy::Signed => format!("s{}", 8 * class.bytes()),
                    CmpTy::Unsigned => format!("u{}", 8 * class.bytes()),
                };
                format!("setp.{}.{t} {d}, {a}, {b};", cmp.name(ty))
            }
            Inst::Selp(d, a, b, p) => format!("selp.{} {d}, {a}, {b}, {p};", d.class.ty()),
            Inst::AndPred(d, p, q) => format!("and.pred {d}, {p}, {q};"),
            Inst::Bra(to, when) => {
                let to = site.label(to);
                match when {
                    None => format!("bra.uni {to};"),
                    Some((p, true)) => format!("@{p} bra {to};"),
                    Some((p, false)) => format!("@!{p} bra {to};"),
                }
            }
            Inst::Label(l) => {
                let _ = writeln!(out, "{}:", site.label(l));
                return;
            }
            Inst::Ret(ref vals) => {
                let mut s = String::new();
                for (i, v) in vals.iter().enumerate() {
                    let slot = site.first_ret + i;
                    let _ = write!(s, "mov.{} %lmx{slot}, {v};\n\t", v.class.ty());
                }
                s + &format!("bra.uni $Lv{}_end;", site.tag)
            }
            Inst::Call(name, ref args, ref rets) => {
                let names = |regs: &[R]| regs.iter().map(R::to_string).collect::<Vec<_>>();
                let callee = find(site.routines, name);
                out.push_str(&callee.inline(&names(args), &names(rets), site.routines, site.tags));
                return;
            }
            Inst::Ld(d, at) => {
                let (space, addr) = self.address(out, at, site);
                format!("ld.{space}.{} {d}, {addr};", d.class.ty())
            }
            Inst::St(at, v) => {
                let (space, addr) = self.address(out, at, site);
                format!("st.{space}.{} {addr}, {v};", v.class.ty())
            }
        };
        let _ = writeln!(out, "\t{line}");
    }

    /// The state space and address operand of `at`, emitting the arithmetic an index
    /// register needs into `out`.
    fn address(&self, out: &mut String, at: Addr, site: &Site<'_>) -> (&'static str, String) {
        let (space, symbol, size) = match at.mem {
            Mem::Table(table) => ("const", table.name.to_string(), table.class.bytes()),
            Mem::Local(arr) => {
                let local = self.locals[arr];
                let symbol = format!("{}_{}", local.name, site.tag);
                ("local", symbol, local.class.bytes())
            }
        };
        let addr = match at.idx {
            Op::Int(i) => format!("[{symbol}+{}]", i * i64::from(size)),
            Op::Reg(r) => {
                assert_eq!(r.class, Class::B32, "index register");
                let shift = size.trailing_zeros();
                let [base, off] = at.tmp;
                let _ = writeln!(out, "\tmov.u64 {base}, {symbol};");
                let _ = writeln!(out, "\tcvt.u64.u32 {off}, {r};");
                let _ = writeln!(out, "\tshl.b64 {off}, {off}, {shift};");
                let _ = writeln!(out, "\tadd.s64 {base}, {base}, {off};");
                format!("[{base}]")
            }
            other => panic!("bad index {other:?}"),
        };
        (space, addr)
    }
}

/// The routine named `name` among `routines`.
pub(crate) fn find<'a>(routines: &'a [Func], name: &str) -> &'a Func {
    let routine = routines.iter().find(|g| g.name == name);
    routine.expect("a routine's helpers are built with it")
}

/// The call site a body is inlined at (see [`Func::inline`]).
struct Site<'a> {
    /// Suffix of this instance's labels and `.local` arrays.
    tag: u32,
    /// The `%lmx` register of the first result.
    first_ret: usize,
    /// The routines an inlined body may call.
    routines: &'a [Func],
    tags: &'a mut u32,
}

impl Site<'_> {
    /// The name of the body's label `l` here.
    fn label(&self, l: u32) -> String {
        format!("$Lv{}_{l}", self.tag)
    }
}

/// The `.const` definition of `table`, eight elements a line.
pub(crate) fn table_ptx(table: &Table) -> String {
    let bytes = table.class.bytes() as usize;
    let hex: Vec<String> = table
        .data
        .iter()
        .map(|v| format!("0x{v:0w$X}", w = 2 * bytes))
        .collect();
    let rows: Vec<String> = hex.chunks(8).map(|row| row.join(", ")).collect();
    format!(
        ".const .align {bytes} .b{} {}[{}] = {{\n\t{}\n}};\n",
        8 * bytes,
        table.name,
        hex.len(),
        rows.join(", \n\t")
    )
}
