//! `BinOp`, `UnOp` and `Cast` lowering with the reference's exact results.
//!
//! The operators that are one PTX instruction are looked up in tables ([`int_shape`],
//! [`f32_arith`], [`f32_unop_inst`]); the rest have a helper each.

use super::half::HalfFormat;
use super::{Lowerer, Val};
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::ValKind;
use crate::codegen::libm::Libm;
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use std::fmt::Display;
use vyre_foundation::ir::{BinOp, DataType, Expr, UnOp};

/// An integer operand type and its PTX spellings: [`U32`], [`I32`] or [`U64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Int {
    kind: ValKind,
    /// The arithmetic type: `u32`, `s32` or `u64`.
    ty: &'static str,
    bits: &'static str,
    unsigned: &'static str,
    signed: &'static str,
    class: RegClass,
    unsigned_max: &'static str,
    shift_mask: u32,
}

const U32: Int = Int {
    kind: ValKind::U32,
    ty: "u32",
    bits: "b32",
    unsigned: "u32",
    signed: "s32",
    class: RegClass::B32,
    unsigned_max: "0xFFFFFFFF",
    shift_mask: 31,
};
const I32: Int = Int {
    kind: ValKind::I32,
    ty: "s32",
    ..U32
};
const U64: Int = Int {
    kind: ValKind::U64,
    ty: "u64",
    bits: "b64",
    unsigned: "u64",
    signed: "s64",
    class: RegClass::B64,
    unsigned_max: "0xFFFFFFFFFFFFFFFF",
    shift_mask: 63,
};

impl Int {
    fn wide(self) -> bool {
        self.class == RegClass::B64
    }

    fn spell(self, sel: Ty) -> &'static str {
        match sel {
            Ty::Arith => self.ty,
            Ty::Bits => self.bits,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Ty {
    /// `u32`, `s32` or `u64` .
    Arith,
    /// `b32` or `b64`.
    Bits,
}

#[derive(Debug, Clone, Copy)]
enum IntShape {
    /// One instruction `{opcode}.{type} d, a, b`.
    Plain(&'static str, Ty),
    /// `min`/`max`; an i32 result passes through the opaque zero. ptxas (12.x and 13.0,
    /// sm_90) fuses `max(a, max(b, -x))` of i32s into a three-input `VIMNMX3` and drops
    /// the negation of `x` (fuzz seed 0x869f8bf45ed27dda); it cannot fuse through the
    /// opaque result.
    MinMax(&'static str),
    /// `setp.{cmp}` to a bool.
    Compare(&'static str),
    /// `and`/`or` of the operands' truthiness, to a bool.
    Logic(&'static str),
    /// `div`/`rem` with the reference's results for zero divisors and overflow.
    DivRem(&'static str),
    /// `{opcode}.{type} d, a, count` with the count masked to the width.
    Shift(&'static str, Ty),
    /// `shf.{dir}.wrap`: the count taken modulo 32, as the reference's `& 31` does.
    Rotate(&'static str),
    /// `max - min`, unsigned.
    AbsDiff,
    /// Unsigned saturating add, sub or mul ([`BinOp`] picks which).
    Saturating(BinOp),
    /// i32 saturating multiply through the 64-bit product.
    SaturatingMulI32,
}

/// The table of integer operators: what `op` on `t` lowers to (`None`: unsupported).
fn int_shape(op: BinOp, t: Int) -> Option<IntShape> {
    use IntShape::*;
    if let Some(cmp) = cmp_suffix(op) {
        return Some(Compare(cmp));
    }
    let signed = t == I32;
    Some(match op {
        BinOp::Add | BinOp::WrappingAdd => Plain("add", Ty::Arith),
        BinOp::Sub | BinOp::WrappingSub => Plain("sub", Ty::Arith),
        BinOp::Mul => Plain("mul.lo", Ty::Arith),
        BinOp::MulHigh if !signed => Plain("mul.hi", Ty::Arith),
        BinOp::Min => MinMax("min"),
        BinOp::Max => MinMax("max"),
        BinOp::BitAnd => Plain("and", Ty::Bits),
        BinOp::BitOr => Plain("or", Ty::Bits),
        BinOp::BitXor => Plain("xor", Ty::Bits),
        BinOp::SaturatingAdd if signed => Plain("add.sat", Ty::Arith),
        BinOp::SaturatingSub if signed => Plain("sub.sat", Ty::Arith),
        BinOp::SaturatingMul if signed => SaturatingMulI32,
        BinOp::SaturatingAdd | BinOp::SaturatingSub | BinOp::SaturatingMul => Saturating(op),
        BinOp::Div => DivRem("div"),
        BinOp::Mod => DivRem("rem"),
        // The reference masks the count; PTX would clamp it.
        BinOp::Shl => Shift("shl", Ty::Bits),
        BinOp::Shr => Shift("shr", Ty::Arith),
        BinOp::RotateLeft if t == U32 => Rotate("l"),
        BinOp::RotateRight if t == U32 => Rotate("r"),
        BinOp::And => Logic("and"),
        BinOp::Or => Logic("or"),
        BinOp::AbsDiff => AbsDiff,
        _ => return None,
    })
}

fn cmp_suffix(op: BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::Eq => "eq",
        BinOp::Ne => "ne",
        BinOp::Lt => "lt",
        BinOp::Gt => "gt",
        BinOp::Le => "le",
        BinOp::Ge => "ge",
        _ => return None,
    })
}

/// f32 arithmetic: the instruction and whether its result is flushed afterwards
/// (division is [`Lowerer::f32_divide`]).
///
/// A subnormal sum/difference of normal operands is exact, so flushing the result
/// (`.ftz`) equals the reference's round-then-canonicalise. Products round first, then
/// flush (never `.ftz`, which may flush a result that rounds up to the smallest normal).
fn f32_arith(op: BinOp) -> Option<(&'static str, bool)> {
    Some(match op {
        BinOp::Add => ("add.rn.ftz.f32", false),
        BinOp::Sub => ("sub.rn.ftz.f32", false),
        BinOp::Mul => ("mul.rn.f32", true),
        _ => return None,
    })
}

/// f32 unary operators that are one instruction `{inst} d, a`.
fn f32_unop_inst(op: &UnOp) -> Option<&'static str> {
    Some(match op {
        // Correctly rounded, like libm's sqrtf; never subnormal for normal input.
        UnOp::Sqrt => "sqrt.rn.f32",
        UnOp::Floor => "cvt.rmi.f32.f32",
        UnOp::Ceil => "cvt.rpi.f32.f32",
        UnOp::Trunc => "cvt.rzi.f32.f32",
        _ => return None,
    })
}

/// The `testp` of the float classification operators.
fn f32_test(op: &UnOp) -> Option<&'static str> {
    Some(match op {
        UnOp::IsNan => "notanumber",
        UnOp::IsInf => "infinite",
        UnOp::IsFinite => "finite",
        _ => return None,
    })
}

/// How a cast to an 8- or 16-bit integer narrows the low word.
#[derive(Debug, Clone, Copy)]
enum Narrow {
    /// `and` with the mask (u8, u16).
    Mask(u32),
    /// Sign-extend from the low `32 - shift` bits (i8, i16).
    SignExtend(u32),
}

/// The targets the reference casts a float to.
fn float_castable(target: &DataType) -> bool {
    matches!(
        target,
        DataType::U32
            | DataType::I32
            | DataType::Bool
            | DataType::F32
            | DataType::Vec2U32
            | DataType::Vec4U32
            | DataType::Bytes
    )
}

fn is_float(kind: ValKind) -> bool {
    matches!(kind, ValKind::F32 | ValKind::F64 | ValKind::Half)
}

/// Whether `op` yields a bool (comparisons and logic).
pub(super) fn binop_is_boolean(op: BinOp) -> bool {
    matches!(
        op,
        BinOp::Eq
            | BinOp::Ne
            | BinOp::Lt
            | BinOp::Le
            | BinOp::Gt
            | BinOp::Ge
            | BinOp::And
            | BinOp::Or
    )
}

fn unsupported_binop(op: BinOp, kind: ValKind) -> CodegenError {
    CodegenError::unsupported(
        format!("BinOp::{op:?} on {}", kind.name()),
        "the reference defines no result for this operator on this type",
        "Cast the operands to a type the operator supports",
    )
}

fn unsupported_unop(op: &UnOp, kind: ValKind) -> CodegenError {
    CodegenError::unsupported(
        format!("UnOp::{op:?} on {}", kind.name()),
        "the reference defines no result for this operator on this type",
        "Cast the operand to a type the operator supports",
    )
}

fn unpack_shift_mask(op: &UnOp) -> Option<(u32, u32)> {
    match op {
        UnOp::Unpack4Low => Some((0, 0x0F)),
        UnOp::Unpack4High => Some((4, 0x0F)),
        UnOp::Unpack8Low => Some((0, 0xFF)),
        UnOp::Unpack8High => Some((24, 0xFF)),
        _ => None,
    }
}

impl Lowerer<'_> {
    fn bool_of(&mut self, p: Reg) -> Val {
        let reg = self.b32();
        emit!(self.w, "selp.u32 {reg}, 1, 0, {p}");
        Val::new(ValKind::Bool, reg)
    }

    /// `setp.{cmp}.{ty} p, a, b` as a bool.
    fn setp_bool(&mut self, cmp: &str, ty: &str, a: Reg, b: impl Display) -> Val {
        let p = self.pred();
        emit!(self.w, "setp.{cmp}.{ty} {p}, {a}, {b}");
        self.bool_of(p)
    }

    /// `d = p ? on : d`.
    fn select_if(&mut self, t: Int, d: Reg, on: &str, p: Reg) {
        emit!(self.w, "selp.{} {d}, {on}, {d}, {p}", t.bits);
    }

    pub(crate) fn put_binop(&mut self, op: BinOp, l: Val, r: Val) -> Result<Val, CodegenError> {
        // Every `Value::Float` (f32, f64-held or a half load) meets the f32 operators as an
        // f32.
        let (l, r) = if is_float(l.kind) && is_float(r.kind) {
            (self.float_operand(l), self.float_operand(r))
        } else {
            (l, r)
        };
        if let Some(raw) = [l, r]
            .into_iter()
            .find(|v| matches!(v.kind, ValKind::Bytes(_)))
        {
            let boolean = binop_is_boolean(op);
            return Ok(self.rejected_operator(DeviceFault::RawOperand, boolean, Some(raw)));
        }
        if l.kind != r.kind {
            return Err(CodegenError::unsupported(
                format!("BinOp::{op:?} on mismatched operands"),
                format!("operands are {} and {}", l.kind.name(), r.kind.name()),
                "insert an explicit Cast so both operands have the same type",
            ));
        }
        match l.kind {
            ValKind::U32 => self.int_binop(op, l.reg, r.reg, U32),
            ValKind::I32 => self.int_binop(op, l.reg, r.reg, I32),
            ValKind::U64 => self.int_binop(op, l.reg, r.reg, U64),
            ValKind::Bool => self.bool_binop(op, l.reg, r.reg),
            ValKind::F32 => self.f32_binop(op, l.reg, r.reg),
            ValKind::F64 | ValKind::Half | ValKind::Bytes(_) => Err(unsupported_binop(op, l.kind)),
        }
    }

    /// An operator the reference rejects whenever it runs (a raw or bytes operand): the
    /// lanes that get here record `fault`, and the value standing in for the result
    /// (discarded with them) is false for a comparison or test, else the fixed operand
    /// (the type vyre's validator gives such an expression), else a u32 zero.
    pub(super) fn rejected_operator(
        &mut self,
        fault: DeviceFault,
        boolean: bool,
        fixed: Option<Val>,
    ) -> Val {
        self.fault_always(fault);
        match (boolean, fixed) {
            (false, Some(value)) => value,
            (true, _) => Val::new(ValKind::Bool, self.imm_b32(0)),
            (false, None) => Val::new(ValKind::U32, self.imm_b32(0)),
        }
    }

    /// Integer operators, as [`int_shape`] lowers them.
    fn int_binop(&mut self, op: BinOp, a: Reg, b: Reg, t: Int) -> Result<Val, CodegenError> {
        let d = self.w.reg(t.class);
        let shape = int_shape(op, t).ok_or_else(|| unsupported_binop(op, t.kind))?;
        let mut kind = t.kind;
        match shape {
            IntShape::Plain(opcode, sel) => {
                emit!(self.w, "{opcode}.{} {d}, {a}, {b}", t.spell(sel));
            }
            IntShape::MinMax(opcode) => {
                emit!(self.w, "{opcode}.{} {d}, {a}, {b}", t.ty);
                if t == I32 {
                    return Ok(Val::new(kind, self.opaque(d)));
                }
            }
            IntShape::Compare(cmp) => return Ok(self.setp_bool(cmp, t.ty, a, b)),
            IntShape::Logic(logic) => {
                let (pa, pb) = (self.pred(), self.pred());
                emit!(self.w, "setp.ne.{} {pa}, {a}, 0", t.ty);
                emit!(self.w, "setp.ne.{} {pb}, {b}, 0", t.ty);
                emit!(self.w, "{logic}.pred {pa}, {pa}, {pb}");
                return Ok(self.bool_of(pa));
            }
            IntShape::DivRem(opcode) => self.div_rem(opcode, [d, a, b], t),
            IntShape::Shift(opcode, sel) => {
                let count = self.b32();
                let from = if t.wide() {
                    emit!(self.w, "cvt.u32.u64 {count}, {b}");
                    count
                } else {
                    b
                };
                emit!(self.w, "and.b32 {count}, {from}, {}", t.shift_mask);
                emit!(self.w, "{opcode}.{} {d}, {a}, {count}", t.spell(sel));
            }
            IntShape::Rotate(dir) => emit!(self.w, "shf.{dir}.wrap.b32 {d}, {a}, {a}, {b}"),
            IntShape::AbsDiff => {
                let lo = self.w.reg(t.class);
                emit!(self.w, "max.{} {d}, {a}, {b}", t.ty);
                emit!(self.w, "min.{} {lo}, {a}, {b}", t.ty);
                emit!(self.w, "sub.{} {d}, {d}, {lo}", t.unsigned);
                if t == I32 {
                    // i32 abs_diff is a u32 in the reference.
                    kind = ValKind::U32;
                }
            }
            IntShape::Saturating(op) => self.saturating_unsigned(op, [d, a, b], t),
            IntShape::SaturatingMulI32 => {
                let wide = self.w.reg(RegClass::B64);
                emit!(self.w, "mul.wide.s32 {wide}, {a}, {b}");
                emit!(self.w, "max.s64 {wide}, {wide}, -2147483648");
                emit!(self.w, "min.s64 {wide}, {wide}, 2147483647");
                emit!(self.w, "cvt.u32.u64 {d}, {wide}");
            }
        }
        Ok(Val { kind, reg: d })
    }

    /// `a / d` or `a % d` for a literal divisor `d` on which the reference cannot fail or
    /// special-case (u32: `d != 0`; i32: `d` neither 0 nor -1), or `None`. A u32 power of
    /// two is a shift or mask; any other divisor stays a literal, so ptxas divides by
    /// multiplying (the general form hides the divisor behind the opaque zero and then
    /// tests it for zero, which costs a full software division in compile time and run
    /// time: 72 of them in vyre-libs' `partial_rope_backward`). The dividend still passes
    /// through the opaque zero (see `div_rem`). An f32 divided by a power-of-two literal
    /// is a multiply (`f32_divide_by_power_of_two`).
    pub(crate) fn put_div_by_literal(&mut self, op: BinOp, l: Val, right: &Expr) -> Option<Val> {
        if let (BinOp::Div, ValKind::F32, Expr::LitF32(c)) = (op, l.kind, right) {
            return self.f32_divide_by_power_of_two(l.reg, *c);
        }
        let opcode = match op {
            BinOp::Div => "div",
            BinOp::Mod => "rem",
            _ => return None,
        };
        let (t, divisor) = match (l.kind, right) {
            (ValKind::U32, Expr::LitU32(d)) if *d != 0 => (U32, i64::from(*d)),
            (ValKind::I32, Expr::LitI32(d)) if *d != 0 && *d != -1 => (I32, i64::from(*d)),
            _ => return None,
        };
        let d = self.w.reg(t.class);
        if t == U32 && divisor.count_ones() == 1 {
            match opcode {
                "div" => emit!(
                    self.w,
                    "shr.u32 {d}, {}, {}",
                    l.reg,
                    divisor.trailing_zeros()
                ),
                _ => emit!(self.w, "and.b32 {d}, {}, {}", l.reg, divisor - 1),
            }
        } else {
            let a = self.opaque(l.reg);
            emit!(self.w, "{opcode}.{} {d}, {a}, {divisor}", t.ty);
        }
        Some(Val::new(t.kind, d))
    }

    /// `a / c` as `a * (1 / c)` when `c` is a normal power of two: 1/c is then an exact
    /// f32, so the product is the same real number as the quotient, rounded the same way.
    fn f32_divide_by_power_of_two(&mut self, a: Reg, c: f32) -> Option<Val> {
        if !c.is_normal() || c.to_bits() & 0x7F_FFFF != 0 {
            return None;
        }
        let inverse = self.f32_const((1.0 / c).to_bits());
        let d = self.w.reg(RegClass::F32);
        emit!(self.w, "mul.rn.f32 {d}, {a}, {inverse}");
        Some(Val::new(ValKind::F32, self.flush_subnormal(d)))
    }

    /// `d = a / b` or `a % b` (`opcode` `div` or `rem`): i32 division by zero and
    /// MIN / -1 are reference errors; unsigned x / 0 = MAX and x % 0 = 0 (PTX leaves
    /// both unspecified).
    fn div_rem(&mut self, opcode: &str, [d, a, b]: [Reg; 3], t: Int) {
        // Operands through the opaque zero: ptxas 13.0 folds signed division and
        // remainder of known operands through unsigned magnitudes, losing signs.
        let (a, b) = (self.opaque(a), self.opaque(b));
        let zero = if t == I32 {
            self.signed_div_faults(opcode == "div", a, b)
        } else {
            let zero = self.pred();
            emit!(self.w, "setp.eq.{} {zero}, {b}, 0", t.ty);
            zero
        };
        let safe = self.w.reg(t.class);
        emit!(self.w, "selp.{} {safe}, 1, {b}, {zero}", t.bits);
        emit!(self.w, "{opcode}.{} {d}, {a}, {safe}", t.ty);
        if t != I32 {
            let on_zero = if opcode == "div" { t.unsigned_max } else { "0" };
            self.select_if(t, d, on_zero, zero);
        }
    }

    /// Records the faults of an i32 division or remainder; true where the divisor must
    /// become 1 (after a recorded fault the result is discarded).
    fn signed_div_faults(&mut self, is_div: bool, a: Reg, b: Reg) -> Reg {
        let (zero, min, neg_one) = (self.pred(), self.pred(), self.pred());
        let (by_zero, overflow) = if is_div {
            (
                DeviceFault::SignedDivisionByZero,
                DeviceFault::SignedDivisionOverflow,
            )
        } else {
            (
                DeviceFault::SignedRemainderByZero,
                DeviceFault::SignedRemainderOverflow,
            )
        };
        emit!(self.w, "setp.eq.s32 {zero}, {b}, 0");
        self.fault_if(zero, by_zero);
        emit!(self.w, "setp.eq.s32 {min}, {a}, -2147483648");
        emit!(self.w, "setp.eq.s32 {neg_one}, {b}, -1");
        emit!(self.w, "and.pred {min}, {min}, {neg_one}");
        self.fault_if(min, overflow);
        emit!(self.w, "or.pred {zero}, {zero}, {min}");
        zero
    }

    /// Unsigned saturating add, sub and mul: the wrapped result, clamped where it wrapped.
    fn saturating_unsigned(&mut self, op: BinOp, [d, a, b]: [Reg; 3], t: Int) {
        let ty = t.ty;
        let (wrapped, on) = match op {
            BinOp::SaturatingAdd => {
                let overflow = self.pred();
                emit!(self.w, "add.{ty} {d}, {a}, {b}");
                emit!(self.w, "setp.lt.{ty} {overflow}, {d}, {a}");
                (overflow, t.unsigned_max)
            }
            BinOp::SaturatingSub => {
                let underflow = self.pred();
                emit!(self.w, "sub.{ty} {d}, {a}, {b}");
                emit!(self.w, "setp.lt.{ty} {underflow}, {a}, {b}");
                (underflow, "0")
            }
            _ => {
                let (hi, overflow) = (self.w.reg(t.class), self.pred());
                emit!(self.w, "mul.hi.{ty} {hi}, {a}, {b}");
                emit!(self.w, "mul.lo.{ty} {d}, {a}, {b}");
                emit!(self.w, "setp.ne.{ty} {overflow}, {hi}, 0");
                (overflow, t.unsigned_max)
            }
        };
        self.select_if(t, d, on, wrapped);
    }

    fn bool_binop(&mut self, op: BinOp, a: Reg, b: Reg) -> Result<Val, CodegenError> {
        let reg = self.b32();
        let logic = match op {
            BinOp::Eq => return Ok(self.setp_bool("eq", "u32", a, b)),
            BinOp::Ne => return Ok(self.setp_bool("ne", "u32", a, b)),
            BinOp::And => "and",
            BinOp::Or => "or",
            _ => return Err(unsupported_binop(op, ValKind::Bool)),
        };
        emit!(self.w, "{logic}.b32 {reg}, {a}, {b}");
        Ok(Val::new(ValKind::Bool, reg))
    }

    fn f32_binop(&mut self, op: BinOp, a: Reg, b: Reg) -> Result<Val, CodegenError> {
        if let Some(cmp) = cmp_suffix(op) {
            // Rust's `!=` is unordered (true with a NaN); the others are ordered.
            let cmp = if cmp == "ne" { "neu" } else { cmp };
            return Ok(self.setp_bool(cmp, "f32", a, b));
        }
        let d = self.w.reg(RegClass::F32);
        let reg = match (op, f32_arith(op)) {
            (_, Some((inst, flush))) => {
                emit!(self.w, "{inst} {d}, {a}, {b}");
                if flush {
                    self.flush_subnormal(d)
                } else {
                    d
                }
            }
            (BinOp::Div, None) => self.f32_divide(a, b),
            (BinOp::Min | BinOp::Max, None) => {
                // Rust f32::min/max on x86-64: the other operand when one is NaN, and the
                // first operand on ties (so min(+0, -0) = +0).
                let (b_wins, a_nan) = (self.pred(), self.pred());
                let cmp = if op == BinOp::Min { "lt" } else { "gt" };
                emit!(self.w, "setp.{cmp}.f32 {b_wins}, {b}, {a}");
                emit!(self.w, "testp.notanumber.f32 {a_nan}, {a}");
                emit!(self.w, "or.pred {b_wins}, {b_wins}, {a_nan}");
                emit!(self.w, "selp.f32 {d}, {b}, {a}, {b_wins}");
                d
            }
            _ => return Err(unsupported_binop(op, ValKind::F32)),
        };
        Ok(Val::new(ValKind::F32, reg))
    }

    pub(crate) fn put_unop(&mut self, op: &UnOp, v: Val) -> Result<Val, CodegenError> {
        if matches!(v.kind, ValKind::Bytes(_)) {
            let boolean = f32_test(op).is_some();
            return Ok(self.rejected_operator(DeviceFault::RawOperand, boolean, Some(v)));
        }
        if let Some((shift, mask)) = unpack_shift_mask(op) {
            if !matches!(v.kind, ValKind::U32 | ValKind::I32) {
                return Err(unsupported_unop(op, v.kind));
            }
            let reg = self.b32();
            emit!(self.w, "shr.u32 {reg}, {}, {shift}", v.reg);
            emit!(self.w, "and.b32 {reg}, {reg}, {mask}");
            return Ok(Val::new(ValKind::U32, reg));
        }
        match v.kind {
            ValKind::U32 | ValKind::I32 => self.int_unop(op, v, U32),
            ValKind::U64 => self.int_unop(op, v, U64),
            ValKind::Bool if matches!(op, UnOp::LogicalNot) => {
                let reg = self.b32();
                emit!(self.w, "xor.b32 {reg}, {}, 1", v.reg);
                Ok(Val::new(ValKind::Bool, reg))
            }
            ValKind::F32 | ValKind::F64 | ValKind::Half => {
                let v = self.float_operand(v);
                self.f32_unop(op, v.reg)
            }
            ValKind::Bool | ValKind::Bytes(_) => Err(unsupported_unop(op, v.kind)),
        }
    }

    /// Integer unary ops; the result keeps the operand's variant (`t` picks the width).
    fn int_unop(&mut self, op: &UnOp, v: Val, t: Int) -> Result<Val, CodegenError> {
        let (a, bits) = (v.reg, t.bits);
        let d = self.w.reg(t.class);
        let value = |reg| Val { kind: v.kind, reg };
        match op {
            UnOp::Negate => {
                // Operand through the opaque zero: ptxas 13.0 (sm_90) folds an unsigned
                // compare of `neg` of a 0/1 value (a `selp 1, 0`) as if signed: `0 > -b`
                // became `b != 0` (fuzz seed 0xe65391424bfe6cd3).
                let a = self.opaque(a);
                emit!(self.w, "neg.{} {d}, {a}", t.signed);
            }
            UnOp::ReverseBits => emit!(self.w, "brev.{bits} {d}, {a}"),
            UnOp::BitNot => {
                // Operand through the opaque zero: ptxas 13.0 (sm_90) folds `not x` to 0
                // where a dominating branch proved x == 0 (it must be all ones).
                let a = self.opaque(a);
                emit!(self.w, "not.{bits} {d}, {a}");
            }
            UnOp::LogicalNot => return Ok(self.setp_bool("eq", t.ty, a, 0)),
            UnOp::Popcount | UnOp::Clz | UnOp::Ctz => {
                let count = self.b32();
                let (opcode, from) = match op {
                    UnOp::Popcount => ("popc", a),
                    UnOp::Clz => ("clz", a),
                    _ => {
                        // ctz(x) = clz(reverse(x)); both give the bit width for 0.
                        let reversed = self.w.reg(t.class);
                        emit!(self.w, "brev.{bits} {reversed}, {a}");
                        ("clz", reversed)
                    }
                };
                emit!(self.w, "{opcode}.{bits} {count}, {from}");
                if !t.wide() {
                    return Ok(value(count));
                }
                emit!(self.w, "cvt.u64.u32 {d}, {count}");
            }
            _ => return Err(unsupported_unop(op, v.kind)),
        }
        Ok(value(d))
    }

    fn f32_unop(&mut self, op: &UnOp, a: Reg) -> Result<Val, CodegenError> {
        let d = self.w.reg(RegClass::F32);
        let one = self.f32_const(0x3F80_0000);
        if let Some(test) = f32_test(op) {
            let p = self.pred();
            emit!(self.w, "testp.{test}.f32 {p}, {a}");
            return Ok(self.bool_of(p));
        }
        let reg = match op {
            UnOp::Negate | UnOp::Abs => self.f32_sign_bit(op, a, d),
            UnOp::InverseSqrt => {
                let root = self.w.reg(RegClass::F32);
                emit!(self.w, "sqrt.rn.f32 {root}, {a}");
                self.f32_divide(one, root)
            }
            UnOp::Reciprocal => self.f32_divide(one, a),
            UnOp::Round => self.f32_round(a, d),
            UnOp::Sign => self.f32_sign(a, d, one),
            _ => match (f32_unop_inst(op), Libm::for_unop(op)) {
                (Some(inst), _) => {
                    emit!(self.w, "{inst} {d}, {a}");
                    d
                }
                (None, Some(f)) => self.call_libm(f, a),
                (None, None) => return Err(unsupported_unop(op, ValKind::F32)),
            },
        };
        Ok(Val::new(ValKind::F32, reg))
    }

    /// `-a` and `|a|` on the bits: ptxas 13.0 folds `neg.f32` of a zero into +0.
    fn f32_sign_bit(&mut self, op: &UnOp, a: Reg, d: Reg) -> Reg {
        let (bits, out) = (self.b32(), self.b32());
        emit!(self.w, "mov.b32 {bits}, {a}");
        let out = if matches!(op, UnOp::Negate) {
            emit!(self.w, "xor.b32 {out}, {bits}, 0x80000000");
            out
        } else {
            // Through the opaque zero: ptxas 13.0 otherwise treats |x| as >= 0
            // and folds ordered comparisons with a NaN to true.
            emit!(self.w, "and.b32 {out}, {bits}, 0x7FFFFFFF");
            self.opaque(out)
        };
        emit!(self.w, "mov.b32 {d}, {out}");
        d
    }

    /// Ties away from zero (Rust f32::round), not PTX's ties-to-even `.rni`:
    /// t = trunc(x); if |x - t| >= 0.5 { t += copysign(1, x) }. x - t is exact.
    fn f32_round(&mut self, a: Reg, d: Reg) -> Reg {
        let (frac, step, away) = (
            self.w.reg(RegClass::F32),
            self.w.reg(RegClass::F32),
            self.pred(),
        );
        let (bits, sign, half) = (self.b32(), self.b32(), self.f32_const(0x3F00_0000));
        emit!(self.w, "cvt.rzi.f32.f32 {d}, {a}");
        emit!(self.w, "sub.rn.f32 {frac}, {a}, {d}");
        let frac_bits = self.b32();
        emit!(self.w, "mov.b32 {frac_bits}, {frac}");
        emit!(self.w, "and.b32 {frac_bits}, {frac_bits}, 0x7FFFFFFF");
        let frac_bits = self.opaque(frac_bits);
        emit!(self.w, "mov.b32 {frac}, {frac_bits}");
        emit!(self.w, "setp.ge.f32 {away}, {frac}, {half}");
        // copysign(1, x) on the bits.
        emit!(self.w, "mov.b32 {bits}, {a}");
        emit!(self.w, "and.b32 {sign}, {bits}, 0x80000000");
        emit!(self.w, "or.b32 {sign}, {sign}, 0x3F800000");
        emit!(self.w, "mov.b32 {step}, {sign}");
        emit!(self.w, "@{away} add.rn.f32 {d}, {d}, {step}");
        d
    }

    /// NaN -> NaN, > 0 -> 1, < 0 -> -1, ±0 -> +0.
    fn f32_sign(&mut self, a: Reg, d: Reg, one: Reg) -> Reg {
        let (pos, neg) = (self.pred(), self.pred());
        let (zero, minus_one) = (self.f32_const(0), self.f32_const(0xBF80_0000));
        emit!(self.w, "setp.gt.f32 {pos}, {a}, {zero}");
        emit!(self.w, "setp.lt.f32 {neg}, {a}, {zero}");
        emit!(self.w, "selp.f32 {d}, {one}, {zero}, {pos}");
        emit!(self.w, "@{neg} mov.f32 {d}, {minus_one}");
        let nan = self.pred();
        emit!(self.w, "testp.notanumber.f32 {nan}, {a}");
        emit!(self.w, "@{nan} mov.f32 {d}, {a}");
        d
    }

    pub(crate) fn put_cast(&mut self, target: &DataType, v: Val) -> Result<Val, CodegenError> {
        if let Some(format) = HalfFormat::of(target) {
            return self.cast_to_half(format, v);
        }
        if v.kind == ValKind::Half && *target == DataType::Bytes {
            return Err(CodegenError::unsupported(
                "Cast of an f16/bf16 load to bytes",
                "its length (8 bytes, or 2 out of bounds) is known only at run time",
                "Cast the load to f32 first",
            ));
        }
        // Every other cast treats an out-of-bounds half load's bytes like +0.0.
        let v = self.settle_half(v);
        if is_float(v.kind) && !float_castable(target) {
            return Err(CodegenError::unsupported(
                format!("Cast from f32 to {target}"),
                "the reference defines float casts only to u32, i32, bool and f32",
                "cast the f32 to u32 or i32 first, then narrow or widen the integer",
            ));
        }
        Ok(match target {
            DataType::U8 => self.cast_narrow(Narrow::Mask(255), v),
            DataType::U16 => self.cast_narrow(Narrow::Mask(65535), v),
            DataType::I8 => self.cast_narrow(Narrow::SignExtend(24), v),
            DataType::I16 => self.cast_narrow(Narrow::SignExtend(16), v),
            DataType::U32 => self.cast_to_32(ValKind::U32, v)?,
            DataType::I32 => self.cast_to_32(ValKind::I32, v)?,
            DataType::U64 | DataType::I64 => self.cast_to_u64(v),
            // A Float stays the same Float (an f64-held value is not rounded here).
            DataType::F32 if v.kind == ValKind::F64 => v,
            DataType::F32 => self.cast_to_f32(v)?,
            DataType::Bool => {
                let p = self.truthy(v);
                self.bool_of(p)
            }
            DataType::Vec4U32 => {
                // The value's bytes, zero-padded to sixteen.
                let lo = self.bytes_b64(v);
                let hi = self.high_half(v);
                let reg = self.w.reg(RegClass::B64);
                self.mov(reg, lo);
                self.upper.insert(reg, smallvec::smallvec![hi]);
                Val::new(ValKind::Bytes(16), reg)
            }
            // The value's bytes, zero-padded or truncated to eight.
            DataType::Vec2U32 => Val::new(ValKind::Bytes(8), self.bytes_b64(v)),
            // The reference's catch-all: the value's own bytes, unconverted (also for the
            // targets whose values are raw bytes: 8-bit floats, handles, raw vectors).
            other
                if matches!(other, DataType::Bytes | DataType::F64)
                    || matches!(ValKind::of_load(other), Some(ValKind::Bytes(_))) =>
            {
                Val {
                    kind: ValKind::Bytes(v.kind.byte_len()),
                    reg: if is_float(v.kind) {
                        self.float_bytes(v)
                    } else {
                        v.reg
                    },
                }
            }
            other => {
                return Err(CodegenError::unsupported(
                    format!("Cast to {other}"),
                    "this cast target is not lowered yet",
                    "cast to a scalar integer, f32, bool or a raw byte type",
                ))
            }
        })
    }

    /// Cast to u32 or i32 (`kind`).
    fn cast_to_32(&mut self, kind: ValKind, v: Val) -> Result<Val, CodegenError> {
        let reg = match v.kind {
            ValKind::F32 | ValKind::F64 => {
                // Truncate toward zero, saturate, NaN -> 0: exactly Rust's `as` (the H200
                // converts an f64 NaN to 0x80000000, so that one is tested).
                let reg = self.b32();
                let sign = if kind == ValKind::U32 { "u32" } else { "s32" };
                let from = if v.kind == ValKind::F32 { "f32" } else { "f64" };
                emit!(self.w, "cvt.rzi.{sign}.{from} {reg}, {}", v.reg);
                if v.kind == ValKind::F64 {
                    let nan = self.pred();
                    emit!(self.w, "testp.notanumber.f64 {nan}, {}", v.reg);
                    emit!(self.w, "selp.b32 {reg}, 0, {reg}, {nan}");
                }
                reg
            }
            // i32 <-> u32 reinterpret the bits (`as`); the rest use try_as_u32.
            ValKind::I32 => v.reg,
            _ => self.u32_checked(v, DeviceFault::CastOutOfRange)?,
        };
        Ok(Val { kind, reg })
    }

    /// Cast to u64 or i64 (both held as a u64).
    fn cast_to_u64(&mut self, v: Val) -> Val {
        let (reg, a) = (self.w.reg(RegClass::B64), v.reg);
        match v.kind {
            ValKind::I32 => emit!(self.w, "cvt.s64.s32 {reg}, {a}"),
            ValKind::U64 | ValKind::Bytes(5..=8) => self.mov(reg, a),
            // Up to four raw bytes, zero-extended in their `.b32`: the reference's
            // `try_as_u64` reads them as a little-endian prefix (a `u8` load casts to it).
            ValKind::Bytes(0..=4) => emit!(self.w, "cvt.u64.u32 {reg}, {a}"),
            // More than eight raw bytes never read as a u64 in the reference.
            ValKind::Bytes(_) => {
                self.fault_unless_empty(v, DeviceFault::CastOutOfRange);
                emit!(self.w, "mov.u64 {reg}, 0");
            }
            _ => emit!(self.w, "cvt.u64.u32 {reg}, {a}"),
        }
        Val::new(ValKind::U64, reg)
    }

    /// Cast of a non-f64 value to f32.
    fn cast_to_f32(&mut self, v: Val) -> Result<Val, CodegenError> {
        let reg = self.w.reg(RegClass::F32);
        let value = Val::new(ValKind::F32, reg);
        let (from, ty) = match v.kind {
            ValKind::F32 => {
                self.mov(reg, v.reg);
                return Ok(value);
            }
            ValKind::I32 => (v.reg, "s32"),
            ValKind::U64 => (v.reg, "u64"),
            _ => (self.u32_checked(v, DeviceFault::CastOutOfRange)?, "u32"),
        };
        // Inputs pass through the opaque zero: ptxas 13.0 fuses sign extensions and byte
        // extractions into wrong I2F forms otherwise.
        let from = self.opaque(from);
        emit!(self.w, "cvt.rn.f32.{ty} {reg}, {from}");
        Ok(value)
    }

    /// Cast to u8, u16 (zero-extended into a u32) or i8, i16 (sign-extended into an i32).
    fn cast_narrow(&mut self, narrow: Narrow, v: Val) -> Val {
        let low = self.low_word(v.reg);
        let reg = self.b32();
        let kind = match narrow {
            Narrow::Mask(mask) => {
                emit!(self.w, "and.b32 {reg}, {low}, {mask}");
                ValKind::U32
            }
            // Sign-extend with shl + shr.s32, not bfe.s32: ptxas 13.0 (sm_90) folds a
            // bfe.s32 feeding an unsigned int->float conversion into a signed
            // I2F.S8/S16, which is wrong (found by the fuzzer).
            Narrow::SignExtend(shift) => {
                emit!(self.w, "shl.b32 {reg}, {low}, {shift}");
                emit!(self.w, "shr.s32 {reg}, {reg}, {shift}");
                ValKind::I32
            }
        };
        Val { kind, reg }
    }

    /// The value's first eight bytes as a `.b64`, zero-padded.
    pub(super) fn bytes_b64(&mut self, v: Val) -> Reg {
        match v.kind {
            ValKind::F32 | ValKind::F64 | ValKind::Half => self.float_bytes(v),
            ValKind::U64 | ValKind::Bytes(5..) => v.reg,
            _ => {
                let wide = self.w.reg(RegClass::B64);
                emit!(self.w, "cvt.u64.u32 {wide}, {}", v.reg);
                wide
            }
        }
    }
}
